"""Trace content as HTML: untrusted text, escaped piece by piece, with evidence quotes wrapped in <mark>.

Everything a span carries (input, output, attributes, status messages) comes from the traced agent, so none of it
is ever marked safe as it is: `escape()` runs on every piece of content and only our own tags (<mark>, <details>,
<pre>, <div>, <span>) are added around the escaped pieces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

FOLD_CHARS = 1200
FOLD_LINES = 24
_MAX_RENDER_CHARS = 200_000  # beyond this a value is cut (the rest is not shown, and says so)


def quote_pattern(quote: str) -> re.Pattern | None:
    """Matches the quote however whitespace was laid out (JSON pretty-printing adds some) and in any case, as the
    evidence checker does."""
    chars = [c for c in quote if not c.isspace()]
    if len(chars) < 2:
        return None
    return re.compile(r"\s*".join(re.escape(c) for c in chars), re.IGNORECASE)


def _mark_ranges(text: str, patterns: Iterable[re.Pattern]) -> list[tuple[int, int]]:
    ranges = []
    for pattern in patterns:
        ranges += [(m.start(), m.end()) for m in pattern.finditer(text) if m.end() > m.start()]
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def highlight(text: str, patterns: Iterable[re.Pattern] = ()) -> tuple[SafeString, bool]:
    """The text escaped, with every match of the patterns in <mark>; and whether anything matched."""
    ranges = _mark_ranges(text, patterns)
    out, position = [], 0
    for start, end in ranges:
        out.append(escape(text[position:start]))
        out.append(format_html("<mark>{}</mark>", text[start:end]))
        position = end
    out.append(escape(text[position:]))
    return mark_safe("".join(out)), bool(ranges)  # noqa: S308 - every piece above is escaped


def value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _block(text: str, patterns: list[re.Pattern], css: str) -> tuple[str, bool]:
    """A <pre> of the text; long text folded in <details> (opened when a quote is marked inside)."""
    cut = ""
    if len(text) > _MAX_RENDER_CHARS:
        cut = f"\n… {len(text) - _MAX_RENDER_CHARS:,} more characters not shown"
        text = text[:_MAX_RENDER_CHARS]
    body, marked = highlight(text, patterns)
    pre = format_html('<pre class="{}">{}{}</pre>', css, body, cut)
    lines = text.count("\n") + 1
    if len(text) <= FOLD_CHARS and lines <= FOLD_LINES:
        return pre, marked
    first = text.strip().split("\n", 1)[0][:100]
    summary = format_html('<summary><span class="fold-head">{}</span> <span class="muted small">{} chars, {} lines'
                          '{}</span></summary>', first + "…", f"{len(text):,}", f"{lines:,}",
                          " · evidence inside" if marked else "")
    return format_html('<details class="fold"{}>{}{}</details>', mark_safe(" open") if marked else "", summary,
                       pre), marked


def _is_messages(value: Any) -> bool:
    return (isinstance(value, list) and bool(value) and len(value) <= 500
            and all(isinstance(m, dict) and "role" in m and ("parts" in m or "content" in m) for m in value))


def _message_parts(message: dict) -> list[tuple[str, Any]]:
    """[(label, value)] of one chat message: text parts as text, tool calls and the rest as JSON."""
    if "parts" in message and isinstance(message["parts"], list):
        parts = []
        for part in message["parts"]:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("content"), str):
                parts.append(("", part["content"]))
            elif isinstance(part, dict) and part.get("type") == "tool_call":
                parts.append((f"tool call {part.get('name', '')}", part.get("arguments")))
            elif isinstance(part, dict) and part.get("type") == "tool_call_response":
                parts.append(("tool result", part.get("response", part.get("result"))))
            else:
                parts.append(("", part))
        return parts
    content = message.get("content")
    if isinstance(content, list):
        return [("", c.get("text") if isinstance(c, dict) and isinstance(c.get("text"), str) else c)
                for c in content]
    return [("", content)]


def render_value(value: Any, quotes: Iterable[str] = ()) -> tuple[SafeString, bool]:
    """A span's input or output as HTML: chat messages as a list of role-labelled blocks, other strings as text,
    everything else as pretty JSON. Returns the HTML and whether an evidence quote was marked in it."""
    patterns = [p for p in (quote_pattern(q) for q in quotes if q) if p is not None]
    if value is None:
        return format_html('<p class="muted small">{}</p>', "empty"), False
    if _is_messages(value):
        blocks, any_marked = [], False
        for message in value:
            inner = []
            for label, part in _message_parts(message):
                html, marked = _block(value_text(part) if part is not None else "", patterns,
                                      "text" if isinstance(part, str) else "json")
                any_marked |= marked
                if label:
                    inner.append(format_html('<div class="part-label muted small">{}</div>', label))
                inner.append(html)
            extra = {k: v for k, v in message.items() if k not in ("role", "parts", "content")}
            tail = format_html('<div class="muted small">{}</div>', json.dumps(extra, default=str)) if extra else ""
            blocks.append(format_html('<div class="message"><div class="role role-{}">{}</div>{}{}</div>',
                                      re.sub(r"[^a-z]", "", str(message.get("role", "")).lower())[:20],
                                      str(message.get("role", "")), mark_safe("".join(inner)), tail))
        return mark_safe("".join(blocks)), any_marked  # noqa: S308 - built from format_html pieces
    html, marked = _block(value_text(value), patterns, "text" if isinstance(value, str) else "json")
    return mark_safe(html), marked  # noqa: S308 - built from format_html pieces
