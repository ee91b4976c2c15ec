"""JSON bodies nested too deep for the parser: the too-deep values are kept as text, so one span's deep attribute
does not fail the other spans of its request.

json's scanner recurses once per level and raises RecursionError near the interpreter's limit. Only then is the
body scanned again here (a pure-Python walk, so never on the normal path): every object or array that opens at
depth MAX_BODY_DEPTH is replaced by a JSON string holding its text, prefixed with repair.TOO_DEEP_MARK so the
span that holds it records the repair.
"""

from __future__ import annotations

import json
from typing import Any

from .repair import TOO_DEEP_MARK
from .values import loads

MAX_BODY_DEPTH = 400


class TooDeep(ValueError):
    """The body is nested too deep even where no value can be kept as text."""


def _string_close(text: str, *, start: int) -> int:
    """The index of the quote that closes the string opening at `start` (len(text) when it never closes)."""
    i, n = start + 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i
        i += 1
    return n


def _end_of_value(text: str, *, start: int) -> int:
    """The index just past the object or array that opens at `start` (strings skipped, escapes honoured)."""
    depth = 0
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i = _string_close(text, start=i)
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _flatten(text: str, *, limit: int) -> tuple[str, int]:
    out: list[str] = []
    depth = 0
    i, n, last, replaced = 0, len(text), 0, 0
    while i < n:
        ch = text[i]
        if ch == '"':
            i = _string_close(text, start=i)
        elif ch in "[{":
            if depth >= limit:
                end = _end_of_value(text, start=i)
                out.append(text[last:i])
                out.append(json.dumps(TOO_DEEP_MARK + text[i:end]))
                last = i = end
                replaced += 1
                continue
            depth += 1
        elif ch in "]}":
            depth -= 1
        i += 1
    out.append(text[last:])
    return "".join(out), replaced


def loads_bounded(body: str | bytes) -> Any:
    """`values.loads`, except that values nested deeper than MAX_BODY_DEPTH are kept as marked JSON text."""
    try:
        return loads(body)
    except RecursionError:
        pass
    text = body.decode("utf-8-sig") if isinstance(body, (bytes, bytearray)) else body
    flat, _ = _flatten(text, limit=MAX_BODY_DEPTH)
    try:
        return loads(flat)
    except RecursionError:
        raise TooDeep(f"The JSON body is nested more than {MAX_BODY_DEPTH} levels deep.") from None
