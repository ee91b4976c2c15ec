"""JSON schemas of the judges' replies, and a small validator for the subset of JSON Schema they use.

Supported keywords: type (a name or a list of names), properties, required, items, enum, minimum, maximum,
minItems, maxItems, minLength. Extra properties are allowed (and ignored by the judges). Errors are short,
path-prefixed sentences that are sent back to the model in the one repair request, so they never quote the
offending value (which could be long, or carry text lifted from the trace).
"""

from __future__ import annotations

from typing import Any

DIMENSIONS = ("task_completion", "correctness", "tool_use", "efficiency", "coordination")

SCORE = {"type": "number", "minimum": 0, "maximum": 1}
VERDICT = {"type": "string", "enum": ["pass", "fail", "uncertain"]}
EVIDENCE = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["span_id", "quote"],
        "properties": {"span_id": {"type": "string"}, "quote": {"type": "string"}},
    },
}
ISSUE = {
    "type": "object",
    "required": ["title", "detail", "severity", "evidence"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "detail": {"type": "string"},
        "severity": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
        "evidence": EVIDENCE,
    },
}
ISSUES = {"type": "array", "items": ISSUE}

STEP_SCHEMA = {
    "type": "object",
    "required": ["steps"],
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["span_id", "critique", "score", "verdict", "issues"],
                "properties": {
                    "span_id": {"type": "string"},
                    "critique": {"type": "string"},
                    "score": SCORE,
                    "verdict": VERDICT,
                    "issues": ISSUES,
                },
            },
        }
    },
}

DIMENSION = {
    "type": "object",
    "required": ["score", "justification"],
    "properties": {"score": SCORE, "justification": {"type": "string"}},
}

TRACE_SCHEMA = {
    "type": "object",
    "required": ["feedback", "dimensions", "score", "verdict", "outcome_assessment", "root_cause", "issues",
                 "rubrics"],
    "properties": {
        "feedback": {"type": "string", "minLength": 1},
        "dimensions": {"type": "object", "required": list(DIMENSIONS),
                       "properties": {name: DIMENSION for name in DIMENSIONS}},
        "score": SCORE,
        "verdict": VERDICT,
        "outcome_assessment": {"type": "string", "enum": ["success", "failure", "unclear"]},
        "root_cause": {
            "type": ["object", "null"],
            "required": ["node", "span_id", "reason"],
            "properties": {"node": {"type": "string"}, "span_id": {"type": "string"}, "reason": {"type": "string"}},
        },
        "issues": ISSUES,
        "rubrics": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "verdict", "justification", "evidence"],
                "properties": {"id": {"type": "string"}, "verdict": VERDICT, "justification": {"type": "string"},
                               "evidence": EVIDENCE},
            },
        },
    },
}

WINDOW_SCHEMA = {
    "type": "object",
    "required": ["summary", "issues"],
    "properties": {"summary": {"type": "string", "minLength": 1}, "issues": ISSUES},
}

RUBRIC_GEN_SCHEMA = {
    "type": "object",
    "required": ["rubrics"],
    "properties": {
        "rubrics": {
            "type": "array",
            "minItems": 3,
            "maxItems": 5,
            "items": {
                "type": "object",
                "required": ["name", "text"],
                "properties": {"name": {"type": "string", "minLength": 1}, "text": {"type": "string", "minLength": 1}},
            },
        }
    },
}

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is_type(value: Any, name: str) -> bool:
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(value: Any, schema: dict, path: str = "$", errors: list[str] | None = None,
             limit: int = 20) -> list[str]:
    """Every violation of `schema` in `value` as a list of messages (empty when valid)."""
    errors = [] if errors is None else errors
    if len(errors) >= limit:
        return errors
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, name) for name in names):
            errors.append(f"{path}: expected {' or '.join(names)}, got {_json_type(value)}")
            return errors
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {', '.join(map(str, schema['enum']))}")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: must be <= {schema['maximum']}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        errors.append(f"{path}: must not be empty")
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                errors.append(f"{path}: missing required key {key!r}")
        for key, subschema in schema.get("properties", {}).items():
            if key in value:
                validate(value[key], subschema, f"{path}.{key}", errors, limit)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: needs at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: allows at most {schema['maxItems']} items, got {len(value)}")
        if "items" in schema:
            for index, item in enumerate(value):
                validate(item, schema["items"], f"{path}[{index}]", errors, limit)
    return errors[:limit]


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, name):
            return name
    return type(value).__name__
