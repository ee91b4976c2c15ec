"""A small JSONPath subset for rubric checks (no dependency): `$`, `.key`, `['key']`, `[n]`, `[*]`, `.*`, `..key`.

    path = jsonpath_compile("$.orders[*].id")   # raises JsonPathError with the position of the problem
    jsonpath_values(path, document)              # every matched value, in document order

Filters (`[?(...)]`), slices and unions are not supported; the error message says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class JsonPathError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Step:
    op: str  # "key" | "index" | "wildcard" | "descend"
    key: str | int | None = None  # for "descend": the key, or None for ..*


_NAME = re.compile(r"[A-Za-z_][\w\-]*")


def jsonpath_compile(path: str) -> tuple[Step, ...]:
    if not isinstance(path, str) or not path.strip():
        raise JsonPathError("a JSONPath is a non-empty string such as $.order_id or $..invoice_id")
    text = path.strip()
    if not text.startswith("$"):
        raise JsonPathError(f"JSONPath {path!r} must start with '$'")
    steps: list[Step] = []
    i = 1
    while i < len(text):
        if text.startswith("..", i):
            i += 2
            if i < len(text) and text[i] == "*":
                steps.append(Step("descend", None))
                i += 1
                continue
            match = _NAME.match(text, i)
            if not match:
                raise JsonPathError(f"JSONPath {path!r}: expected a key name after '..' at position {i}")
            steps.append(Step("descend", match.group()))
            i = match.end()
        elif text[i] == ".":
            i += 1
            if i < len(text) and text[i] == "*":
                steps.append(Step("wildcard"))
                i += 1
                continue
            match = _NAME.match(text, i)
            if not match:
                raise JsonPathError(f"JSONPath {path!r}: expected a key name after '.' at position {i}")
            steps.append(Step("key", match.group()))
            i = match.end()
        elif text[i] == "[":
            end = text.find("]", i)
            if end < 0:
                raise JsonPathError(f"JSONPath {path!r}: '[' at position {i} is never closed")
            inner = text[i + 1:end].strip()
            if inner == "*":
                steps.append(Step("wildcard"))
            elif re.fullmatch(r"-?\d+", inner):
                steps.append(Step("index", int(inner)))
            elif len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
                steps.append(Step("key", inner[1:-1]))
            elif inner.startswith("?") or ":" in inner or "," in inner:
                raise JsonPathError(f"JSONPath {path!r}: filters, slices and unions ({inner!r}) are not supported; "
                                    "use $.a.b, $.a[*].b, $.a[0] or $..key")
            else:
                raise JsonPathError(f"JSONPath {path!r}: cannot read [{inner}] at position {i}")
            i = end + 1
        else:
            raise JsonPathError(f"JSONPath {path!r}: unexpected {text[i]!r} at position {i}")
    return tuple(steps)


def _descendants(value: Any):
    yield value
    if isinstance(value, dict):
        for child in value.values():
            yield from _descendants(child)
    elif isinstance(value, list):
        for child in value:
            yield from _descendants(child)


def _apply(step: Step, value: Any):
    if step.op == "key":
        if isinstance(value, dict) and step.key in value:
            yield value[step.key]
    elif step.op == "index":
        if isinstance(value, list) and -len(value) <= step.key < len(value):
            yield value[step.key]
    elif step.op == "wildcard":
        if isinstance(value, dict):
            yield from value.values()
        elif isinstance(value, list):
            yield from value
    elif step.op == "descend":
        for node in _descendants(value):
            if step.key is None:
                if node is not value:
                    yield node
            elif isinstance(node, dict) and step.key in node:
                yield node[step.key]


def jsonpath_values(path: str | tuple[Step, ...], document: Any) -> list[Any]:
    steps = jsonpath_compile(path) if isinstance(path, str) else path
    current = [document]
    for step in steps:
        current = [found for value in current for found in _apply(step, value)]
    return current
