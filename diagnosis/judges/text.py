"""How judges and the evidence check see span content as text: one function, so a quote a judge takes from a span
is always found again when the evidence is verified."""

from __future__ import annotations

import json
import re
from typing import Any

_WS = re.compile(r"\s+")


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


def normalise(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()
