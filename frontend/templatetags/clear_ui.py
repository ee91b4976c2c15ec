"""Small formatting filters for the pages (numbers, times, the inline Markdown of titles: trace content goes through
frontend.render)."""

import re
from datetime import datetime
from datetime import timezone as dt_timezone

from django import template
from django.template.defaultfilters import date as date_format
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def money(value) -> str:
    """$0.0123 for small amounts, $12.35 for larger ones, $0 for none."""
    try:
        amount = float(value or 0)
    except (TypeError, ValueError):
        return "—"
    if amount == 0:
        return "$0"
    if abs(amount) < 1:
        return f"${amount:.4f}".rstrip("0").rstrip(".") if abs(amount) >= 0.0001 else f"${amount:.2g}"
    return f"${amount:,.2f}"


@register.filter
def duration(ms) -> str:
    """Milliseconds as 850 ms, 2.3 s, 4m 05s."""
    if ms is None:
        return "—"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    return f"{minutes}m {seconds:02d}s"


@register.filter
def percent(rate) -> str:
    if rate is None:
        return "—"
    return f"{100 * float(rate):.0f}%"


@register.filter
def percent_num(rate) -> str:
    """A CSS width: 0–100 with at most one decimal."""
    if rate is None:
        return "0"
    return f"{max(0.0, min(100.0, 100 * float(rate))):.1f}"


@register.filter
def width_class(rate) -> str:
    """A rate (0..1) as the bar class of its width, .w-0 to .w-100 in clear.css (the Content-Security-Policy
    allows no style="" attribute)."""
    try:
        share = 0.0 if rate is None else float(rate)
    except (TypeError, ValueError):
        share = 0.0
    return f"w-{round(max(0.0, min(1.0, share)) * 100)}"


@register.filter
def thousands(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def shortid(value, length: int = 8) -> str:
    return str(value)[: int(length)]


@register.filter
def elapsed(obj) -> str:
    """The duration between an object's start_time and end_time."""
    start, end = getattr(obj, "start_time", None), getattr(obj, "end_time", None)
    if start is None or end is None:
        return "—"
    return duration(max((end - start).total_seconds(), 0) * 1000)


# --- Markdown in titles ------------------------------------------------------------------------------------------
# Insight titles, ticket titles and judges' issue titles carry inline Markdown (`node`, **word**); exports keep it,
# pages render it. Only these two spans: anything else in a title is text, escaped like the rest.
_MD_SPAN = re.compile(r"`([^`\n]+)`|\*\*([^*\n]+)\*\*")


def _md_segments(text: str) -> list[tuple[str, str]]:
    """[(kind, text)] with kind "", "code" or "strong"; the markers dropped."""
    segments, at = [], 0
    for match in _MD_SPAN.finditer(text):
        if match.start() > at:
            segments.append(("", text[at:match.start()]))
        segments.append(("code", match.group(1)) if match.group(1) is not None else ("strong", match.group(2)))
        at = match.end()
    if at < len(text):
        segments.append(("", text[at:]))
    return segments


def _md_truncated(segments: list[tuple[str, str]], limit) -> list[tuple[str, str]]:
    """At most `limit` visible characters, the last one "…" when cut (as truncatechars counts)."""
    if not limit or sum(len(s) for _, s in segments) <= int(limit):
        return segments
    room, out = int(limit) - 1, []
    for kind, s in segments:
        if room <= 0:
            break
        out.append((kind, s[:room]))
        room -= len(s[:room])
    out.append(("", "…"))
    return out


@register.filter
def md_inline(value, limit=None) -> str:
    """A title with its `code` spans as <code> and **bold** as <strong>, everything escaped; `limit` cuts it to
    that many visible characters (never inside a marker, which would then show raw)."""
    parts = []
    for kind, s in _md_truncated(_md_segments(str(value or "")), limit):
        parts.append(format_html("<{}>{}</{}>", kind, s, kind) if kind else conditional_escape(s))
    return mark_safe("".join(parts))  # noqa: S308 - every part escaped above


@register.filter
def md_plain(value, limit=None) -> str:
    """A title as plain text, its Markdown markers dropped (for <title>, attributes and truncated labels); left to
    autoescaping."""
    return "".join(s for _, s in _md_truncated(_md_segments(str(value or "")), limit))


@register.filter
def judge_label(judge, names) -> str:
    """A judge as the pages name it: a rubric by its name (`names`: rubric_judge_names), with its id as the tooltip
    since the CLI and the API take the id; any other judge by its id, as code."""
    name = (names or {}).get(judge)
    if name:
        return format_html('<span title="{}">{}</span>', judge, name)
    return format_html("<code>{}</code>", judge)


@register.filter
def iso_time(value, fmt: str = "Y-m-d H:i:s") -> str:
    """An ISO 8601 string (the release files keep them so) in the pages' date format, in the site's time zone."""
    if not value:
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt_timezone.utc)
    return date_format(timezone.localtime(value), fmt)
