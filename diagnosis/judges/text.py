"""How judges and the evidence check see span content as text: one function, so a quote a judge takes from a span
is always found again when the evidence is verified.

It also reads model turns in the formats real agents emit (`has_content`, `finish_reasons_of`), so a judge never
mistakes a turn for an empty one because its content sits where one format puts it and another does not:

* OpenAI chat: a message `{"role", "content": null, "tool_calls": [...]}` (legacy `function_call`, a `refusal`), a
  list of them, a choice `{"message": {...}, "finish_reason"}` or a whole completion `{"choices": [...]}`;
  `content` may also be a list of parts `{"type": "text", "text"}`; Responses API items `{"type": "function_call"}`.
* GenAI semantic conventions: `{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", ...}]}`.
* OpenInference flattened `llm.output_messages.N.message.*` (re-nested by the normaliser):
  `{"role", "content", "tool_calls": [{"tool_call": {"function": {"name", "arguments"}}}]}`, `contents` parts.
* Anthropic: `{"role", "content": [{"type": "text", "text"}, {"type": "tool_use", ...}], "stop_reason"}`.

A turn that calls a tool has produced output, even with no text at all.
"""

from __future__ import annotations

import json
import re
from typing import Any

_WS = re.compile(r"\s+")
# A line that reports an error or exception in free text ("ValueError: …", "Error: …", a traceback's first line).
ERROR_LINE = re.compile(
    r"^[ \t]*(?:[A-Za-z][A-Za-z ]{0,24}:[ \t]*)?"
    r"(?:traceback \(most recent call last\)|[\w.]*(?:error|exception)[ \t]*:|fatal[ \t]*:)[^\n]*",
    re.IGNORECASE | re.MULTILINE,
)


def dump(value: Any) -> str:
    """Compact, stable JSON for quoting structured values (arguments, error payloads)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def maybe_json(value: Any) -> Any:
    """A string holding a JSON object or array, parsed; anything else unchanged."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            try:
                return json.loads(stripped)
            except ValueError:
                return value
    return value


def _leaves(value: Any, out: list[str], depth: int = 0) -> None:
    if depth > 50:
        return
    if isinstance(value, str):
        out.append(value)
        parsed = maybe_json(value)
        if parsed is not value:
            _leaves(parsed, out, depth + 1)
            out.append(dump(parsed))
    elif isinstance(value, dict):
        for key, child in value.items():
            out.append(str(key))
            _leaves(child, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for child in value:
            _leaves(child, out, depth + 1)
    elif value is not None:
        out.append(dump(value))


def value_text(value: Any) -> str:
    """Every string in a value (JSON strings inside it parsed too), then its JSON dump; empty for None."""
    if value is None:
        return ""
    parts: list[str] = []
    _leaves(value, parts)
    if not isinstance(value, str):
        parts.append(dump(value))
    return "\n".join(parts)


def plain_text(value: Any) -> str:
    """The readable text of a value: strings as they are, message parts' text content joined, others as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    texts: list[str] = []
    _message_texts(value, texts)
    return "\n".join(texts) if texts else dump(value)


def _message_texts(value: Any, out: list[str]) -> None:
    if isinstance(value, list):
        for item in value:
            _message_texts(item, out)
    elif isinstance(value, dict):
        for key in ("content", "text"):
            if isinstance(value.get(key), str):
                out.append(value[key])
        for key in ("parts", "content", "messages"):
            if isinstance(value.get(key), list):
                _message_texts(value[key], out)


_MESSAGE_KEYS = ("message", "msg", "detail", "description", "error")
_ERROR_PREFIX = re.compile(r"\A\s*error\s*:", re.IGNORECASE)


def error_payload(output: Any) -> str | None:
    """The error a tool's output reports, even when its span's status says OK (tau-bench's tools answer "Error: …"):
    the `error` member of a top-level JSON object (a nested one is data the tool returned, not its error); text
    that starts with "Error:" after whitespace (the whole message, whitespace collapsed, since a message may go on
    past the first line); else a free-text error line (a traceback's, "ValueError: …")."""
    value = maybe_json(output)
    if isinstance(value, dict):
        error = value.get("error")
        if error not in (None, False, "", [], {}):
            return error if isinstance(error, str) else dump(error)
        return None
    text = plain_text(value)
    if not text:
        return None
    if _ERROR_PREFIX.match(text):
        return " ".join(text.split())[:200]
    match = ERROR_LINE.search(text)
    if match:
        return match.group(0).strip()[:200]
    return None


# Instance values in an error message (error_pattern), most specific first. A token that mixes letters and digits is
# a value (HAT030, certificate_7504069, gift_card_5094406, O-5012); names have no digits (update_reservation_flights).
_PATTERN_VALUES = (
    ('"\u2026"', re.compile(r"\"[^\"\n]{0,200}\"|(?<!\w)'[^'\n]{0,200}'(?!\w)|`[^`\n]{0,200}`"
                            r"|\u201c[^\u201d\n]{0,200}\u201d")),
    ("<id>", re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", re.IGNORECASE)),
    ("<date>", re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")),
    ("<time>", re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b")),
    ("<id>", re.compile(r"(?<![\w.\-/])(?=[\w.\-/@]*\d)(?=[\w.\-/@]*[A-Za-z_])[\w.\-/@]*[A-Za-z0-9_]")),
    ("N", re.compile(r"(?<![\w.])[-+]?\$?\d(?:[\d,]*\d)?(?:\.\d+)?%?(?!\w)")),
)
_ERROR_WORD = re.compile(r"\A\s*error\s*:\s*", re.IGNORECASE)
PATTERN_MAX = 100


def error_pattern(message: str) -> str:
    """What an error message says once its values are taken out: the first line without its "Error:" label, quoted
    values as "…", ids <id>, dates <date>, times <time>, numbers N ("Error: flight HAT030 not available on date
    2024-05-13" -> "flight <id> not available on date <date>"), cut at a word within PATTERN_MAX characters. Two
    occurrences of one fault read the same; different faults of one tool stay different. Idempotent."""
    error = maybe_json(message)
    if isinstance(error, dict):  # {"code": "NOT_FOUND", "message": "no record …"}: its kind and its message
        kind = next((error[k] for k in ("type", "code", "name") if isinstance(error.get(k), str) and error[k]), "")
        text = next((error[k] for k in _MESSAGE_KEYS if isinstance(error.get(k), str) and error[k]), "")
        message = ": ".join(part for part in (kind, text) if part) or message
    line = next((part for part in (message or "").splitlines() if part.strip()), "")
    text = _ERROR_WORD.sub("", line)
    for placeholder, pattern in _PATTERN_VALUES:
        text = pattern.sub(placeholder, text)
    text = " ".join(text.split()).rstrip(" .:;,")
    if len(text) > PATTERN_MAX:
        text = text[:PATTERN_MAX - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "\u2026"
    return text


def normalise(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


# ---------------------------------------------------------------------------------------------------------------
# model turns, whatever their format

# Part / block / item types that are a tool call or its result rather than text (GenAI parts, Anthropic blocks,
# OpenAI Responses items, OpenInference `message_content.type`).
TOOL_CALL_TYPES = frozenset({
    "tool_call", "tool_call_response", "server_tool_call", "server_tool_call_response", "tool_use", "tool_result",
    "server_tool_use", "function_call", "function_call_output", "custom_tool_call", "computer_call", "mcp_call",
    "web_search_call", "file_search_call", "code_interpreter_call", "function",
})
# Keys whose non-empty value is a tool call (OpenAI chat / OpenInference, legacy OpenAI, Vercel, Gemini, Anthropic).
_TOOL_CALL_KEYS = ("tool_calls", "function_call", "toolCalls", "functionCall", "tool_use")
# Why a model stopped when it stopped to call tools.
TOOL_CALL_REASONS = frozenset({"tool_calls", "tool_call", "tool_use", "function_call"})
# Keys that hold what a message says: where to look for text or tool calls.
_CONTENT_KEYS = ("content", "text", "parts", "contents", "message_content", "message", "messages", "choices",
                 "output", "refusal")
# Keys of message envelopes, choices, completions and parts that say nothing by themselves. A mapping with any other
# key, or with none of the content, tool-call or role keys, is some tool's or agent's payload (`{"id": 7}` is a
# result), which is output whatever it holds.
_ENVELOPE_KEYS = frozenset({
    "role", "name", "id", "index", "type", "object", "created", "created_at", "model", "finish_reason",
    "stop_reason", "stop_sequence", "logprobs", "usage", "system_fingerprint", "service_tier", "annotations",
    "audio", "tool_call_id", "mime_type", "prompt_filter_results", "content_filter_results", "provider",
    "incomplete_details",
})
_MESSAGE_KEYS = _ENVELOPE_KEYS | frozenset(_CONTENT_KEYS) | frozenset(_TOOL_CALL_KEYS)


def _present(value: Any) -> bool:
    return value not in (None, "", [], {})


_SAYING_KEYS = frozenset(_CONTENT_KEYS) | frozenset(_TOOL_CALL_KEYS) | {"role"}


def _message_like(value: dict) -> bool:
    keys = value.keys()
    return keys <= _MESSAGE_KEYS and not keys.isdisjoint(_SAYING_KEYS)


def has_content(value: Any, *, depth: int = 0) -> bool:
    """Whether a span's input or output says anything: non-blank text, a tool call (or its result) in any of the
    formats above, any other data. Message envelopes whose text is blank and which call no tool say nothing."""
    if depth > 20:
        return True
    value = maybe_json(value)
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (list, tuple)):
        return any(has_content(item, depth=depth + 1) for item in value)
    if not isinstance(value, dict):
        return True  # a number or a boolean is a result
    if not value:
        return False
    if not _message_like(value):
        return True
    if str(value.get("type") or "") in TOOL_CALL_TYPES:
        return True
    if any(_present(maybe_json(value.get(key))) for key in _TOOL_CALL_KEYS):
        return True
    if str(value.get("finish_reason") or value.get("stop_reason") or "").lower() in TOOL_CALL_REASONS:
        return True
    return any(has_content(value.get(key), depth=depth + 1) for key in _CONTENT_KEYS if key in value)


def finish_reasons_of(value: Any) -> list[str]:
    """Why the model stopped, as its output says: `finish_reason` of messages and choices, Anthropic `stop_reason`."""
    value = maybe_json(value)
    reasons: list[str] = []
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, dict):
            continue
        for key in ("finish_reason", "stop_reason"):
            if isinstance(item.get(key), str) and item[key]:
                reasons.append(item[key])
        choices = item.get("choices")
        if isinstance(choices, list):
            reasons += [str(c["finish_reason"]) for c in choices if isinstance(c, dict) and c.get("finish_reason")]
    return reasons
