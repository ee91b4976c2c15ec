"""Finding the role's JSON object in what a coding-agent CLI printed."""

from __future__ import annotations

import json
import re

_FENCED = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_MAX_SCAN = 2000  # opening braces tried in free text


def _object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def json_output_extract(text: str) -> dict | None:
    """The role output in `text`: a whole-text JSON object (a CLI's result envelope is unwrapped through its
    `structured_output` or `result` field), else the last fenced ```json block, else the last line or trailing
    top-level object found in free text."""
    text = (text or "").strip()
    if not text:
        return None
    whole = _object(text)
    if whole is not None:
        if isinstance(whole.get("structured_output"), dict):
            return whole["structured_output"]
        if isinstance(whole.get("result"), str) and set(whole) & {"session_id", "type", "is_error"}:
            return json_output_extract(whole["result"])
        return whole
    for block in reversed(_FENCED.findall(text)):
        value = _object(block.strip())
        if value is not None:
            return value
    for line in reversed(text.splitlines()):
        value = _object(line.strip())
        if value is not None:
            return value
    decoder, found, position = json.JSONDecoder(), None, 0
    for _ in range(_MAX_SCAN):  # left to right, so a nested object never wins over the one containing it
        start = text.find("{", position)
        if start < 0:
            break
        try:
            value, position = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        if isinstance(value, dict):
            found = value
    return found


def json_lines(text: str) -> list[dict]:
    """Every line of `text` that is a JSON object (stream formats: one event per line, noise skipped)."""
    events = []
    for line in (text or "").splitlines():
        value = _object(line.strip()) if line.strip().startswith("{") else None
        if value is not None:
            events.append(value)
    return events
