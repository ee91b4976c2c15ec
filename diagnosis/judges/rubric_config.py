"""Rubric configs: what a project may assert about its traces, validated and normalised before it is stored.

A rubric is plain data: {"id", "name", "kind", "node", "config"}. `rubric_config_validate` normalises a config or
raises RubricConfigError with a message naming the field and how to write it. Every kind accepts
"when": {"goal_regex": "..."} (apply only to traces whose goal matches). Span selectors are {"node", "kind", "tool",
"name"}, each a string or a list, all given keys must match. The deterministic kinds are evaluated by
rubric_checks.py, `llm` rubrics by the LLM trace judge.
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.judges.jsonpath import JsonPathError, jsonpath_compile

KINDS = ("regex", "jsonpath", "tool_order", "tool_never", "coverage", "llm")
_SELECTOR_KEYS = ("node", "kind", "tool", "name")
_FIELDS = ("output", "input", "any")
_ASSERTS = ("exists", "absent", "equals", "matches", "in")


class RubricConfigError(ValueError):
    pass


def _strings(value: Any, where: str) -> list[str]:
    if isinstance(value, str) and value.strip():
        return [value.strip()]
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return [v.strip() for v in value]
    raise RubricConfigError(f"{where} must be a non-empty string or a list of non-empty strings")


def _regex(value: Any, where: str, flags: int = 0) -> str:
    if not isinstance(value, str) or not value:
        raise RubricConfigError(f"{where} must be a non-empty regular expression string")
    try:
        re.compile(value, flags)
    except re.error as exc:
        raise RubricConfigError(f"{where} {value!r} is not a valid regular expression: {exc}") from None
    return value


def _selector(value: Any, where: str, *, required: bool = False) -> dict:
    if value is None:
        if required:
            raise RubricConfigError(f"{where} is required: a span selector such as {{\"kind\": \"TOOL\"}}")
        return {}
    if not isinstance(value, dict):
        raise RubricConfigError(f"{where} must be an object with any of {', '.join(_SELECTOR_KEYS)}")
    unknown = sorted(set(value) - set(_SELECTOR_KEYS))
    if unknown:
        raise RubricConfigError(f"{where} has unknown keys {unknown}; use {', '.join(_SELECTOR_KEYS)}")
    selector = {key: _strings(val, f"{where}.{key}") for key, val in value.items()}
    if "kind" in selector:
        selector["kind"] = [k.upper() for k in selector["kind"]]
    if required and not selector:
        raise RubricConfigError(f"{where} must select some spans, e.g. {{\"node\": \"writer\"}}")
    return selector


def _choice(value: Any, where: str, choices: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in choices:
        raise RubricConfigError(f"{where} must be one of {', '.join(choices)} (got {value!r})")
    return value


def _when(value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) - {"goal_regex"}:
        raise RubricConfigError('"when" must be {"goal_regex": "<regular expression>"}')
    return {"goal_regex": _regex(value.get("goal_regex"), "when.goal_regex", re.IGNORECASE)}


def rubric_config_validate(kind: str, config: Any) -> dict:
    """The config, normalised; RubricConfigError says what is wrong and how to write it."""
    if kind not in KINDS:
        raise RubricConfigError(f"Unknown rubric kind {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(config, dict):
        raise RubricConfigError(f"A {kind} rubric's config must be a JSON object")
    allowed = {"when", "description"}
    out: dict[str, Any] = {}
    if kind == "regex":
        allowed |= {"pattern", "expect", "field", "spans", "ignore_case"}
        ignore_case = config.get("ignore_case", False)
        if not isinstance(ignore_case, bool):
            raise RubricConfigError("ignore_case must be true or false")
        out = {
            "pattern": _regex(config.get("pattern"), "pattern", re.IGNORECASE if ignore_case else 0),
            "expect": _choice(config.get("expect"), "expect", ("present", "absent"), "present"),
            "field": _choice(config.get("field"), "field", _FIELDS, "output"),
            "spans": _selector(config.get("spans"), "spans"),
            "ignore_case": ignore_case,
        }
    elif kind == "jsonpath":
        allowed |= {"path", "assert", "value", "pattern", "field", "spans"}
        try:
            jsonpath_compile(config.get("path"))
        except JsonPathError as exc:
            raise RubricConfigError(f"path: {exc}") from None
        out = {
            "path": config["path"].strip(),
            "assert": _choice(config.get("assert"), "assert", _ASSERTS, "exists"),
            "field": _choice(config.get("field"), "field", ("output", "input"), "output"),
            "spans": _selector(config.get("spans"), "spans"),
        }
        if out["assert"] in ("equals", "in"):
            if "value" not in config:
                raise RubricConfigError(f'assert "{out["assert"]}" needs "value"')
            if out["assert"] == "in" and not isinstance(config["value"], list):
                raise RubricConfigError('assert "in" needs "value" to be a list')
            out["value"] = config["value"]
        if out["assert"] == "matches":
            out["pattern"] = _regex(config.get("pattern"), "pattern")
    elif kind == "tool_order":
        allowed |= {"first", "then"}
        out = {"first": _strings(config.get("first"), "first")}
        if config.get("then") is not None:
            out["then"] = _strings(config.get("then"), "then")
    elif kind == "tool_never":
        allowed |= {"tool"}
        out = {"tool": _strings(config.get("tool"), "tool")}
    elif kind == "coverage":
        allowed |= {"path", "sources", "target", "min_length"}
        paths = config.get("path")
        paths = [paths] if isinstance(paths, str) else paths
        if not isinstance(paths, list) or not paths:
            raise RubricConfigError('path must be a JSONPath or a list of them, e.g. "$..order_id"')
        for path in paths:
            try:
                jsonpath_compile(path)
            except JsonPathError as exc:
                raise RubricConfigError(f"path: {exc}") from None
        min_length = config.get("min_length", 1)
        if not isinstance(min_length, int) or min_length < 1:
            raise RubricConfigError("min_length must be a positive integer")
        out = {
            "path": [p.strip() for p in paths],
            "sources": _selector(config.get("sources"), "sources", required=True),
            "target": _selector(config.get("target"), "target", required=True),
            "min_length": min_length,
        }
    elif kind == "llm":
        allowed |= {"criterion", "scope"}
        criterion = config.get("criterion")
        if not isinstance(criterion, str) or not criterion.strip():
            raise RubricConfigError('An llm rubric needs "criterion": the natural-language rule the judge applies')
        out = {"criterion": criterion.strip(), "scope": _choice(config.get("scope"), "scope", ("trace", "step"),
                                                                "trace")}
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise RubricConfigError(f"Unknown keys {unknown} for a {kind} rubric; allowed: {', '.join(sorted(allowed))}")
    when = _when(config.get("when"))
    if when:
        out["when"] = when
    if isinstance(config.get("description"), str):
        out["description"] = config["description"]
    return out
