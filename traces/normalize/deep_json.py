"""JSON bodies nested too deep for the parser: the too-deep values are kept as text, so one span's deep attribute
does not fail the other spans of its request.

json's scanner recurses once per level and raises RecursionError near the interpreter's limit. Only then is the
body scanned again here (token by token, never on the normal path): every object or array that opens at
depth MAX_BODY_DEPTH is replaced by a JSON string holding its text, prefixed with repair.TOO_DEEP_MARK so the
span that holds it records the repair.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .repair import TOO_DEEP_MARK
from .values import loads

MAX_BODY_DEPTH = 400


class TooDeep(ValueError):
    """The body is nested too deep even where no value can be kept as text."""


# A string (escapes honoured; one that never closes runs to the end) or a bracket: the scan below steps from token to
# token in the regex engine, not character by character in Python.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]', re.S)


def _end_of_value(text: str, *, start: int) -> int:
    """The index just past the object or array that opens at `start` (strings skipped, escapes honoured)."""
    depth = 0
    for token in _TOKEN.finditer(text, start):
        ch = text[token.start()]
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return token.end()
    return len(text)


def _flatten(text: str, *, limit: int) -> tuple[str, int]:
    out: list[str] = []
    depth = last = replaced = 0
    token = _TOKEN.search(text)
    while token:
        ch, at = text[token.start()], token.start()
        if ch in "[{":
            if depth >= limit:
                end = _end_of_value(text, start=at)
                out.append(text[last:at])
                out.append(json.dumps(TOO_DEEP_MARK + text[at:end]))
                last = end
                replaced += 1
                token = _TOKEN.search(text, end)
                continue
            depth += 1
        elif ch in "]}":
            depth -= 1
        token = _TOKEN.search(text, token.end())
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
