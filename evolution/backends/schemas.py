"""The JSON each role must return (research §7.7), and one validator that turns violations into sentences.

Extra properties are allowed everywhere: a model that adds a field has not broken the contract.
"""

from typing import Any

import jsonschema

from evolution.backends.base import Role
from evolution.errors import BackendError

MESSAGE_MAX_CHARS = 300
_STRINGS = {"type": "array", "items": {"type": "string"}}
_TEXT = {"type": "string"}
_FLAG_OR_TEXT = {"type": ["string", "boolean"]}

DIAGNOSIS_SCHEMA: dict = {
    "type": "object",
    "required": ["clusters"],
    "properties": {
        "clusters": {"type": "array", "items": {
            "type": "object",
            "required": ["id", "title", "task_ids", "root_cause", "evidence", "confidence"],
            "properties": {
                "id": _TEXT, "title": _TEXT, "task_ids": _STRINGS, "root_cause": _TEXT,
                "evidence": {"type": "array", "items": {
                    "type": "object", "required": ["file", "quote"],
                    "properties": {"file": _TEXT, "line": {"type": ["integer", "null"], "minimum": 1},
                                   "quote": {"type": "string", "maxLength": 200}},
                }},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
        }},
        "not_reproduced_task_ids": _STRINGS,
        "notes": _TEXT,
    },
}

PLAN_SCHEMA: dict = {
    "type": "object",
    "required": ["changes", "per_task_impact"],
    "properties": {
        "changes": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["file", "change", "rationale"],
            "properties": {"file": _TEXT, "symbol": _TEXT, "change": _TEXT, "rationale": _TEXT},
        }},
        "tests_to_add": _STRINGS,
        "per_task_impact": {"type": "array", "items": {
            "type": "object", "required": ["task_id", "touched", "prediction"],
            "properties": {"task_id": _TEXT, "touched": {"type": "boolean"},
                           "prediction": {"enum": ["improved", "unchanged", "risk"]}, "why": _TEXT},
        }},
        "risks": _STRINGS,
        "dependency_changes": _STRINGS,
    },
}

PLAN_REVIEW_SCHEMA: dict = {
    "type": "object",
    "required": ["verdict", "issues"],
    "properties": {
        "verdict": {"enum": ["APPROVE", "REJECT_ARCHITECTURAL", "REJECT_COMPLETENESS"]},
        "issues": {"type": "array", "items": {
            "type": "object", "required": ["severity", "detail"],
            "properties": {"severity": _TEXT, "dimension": _TEXT, "detail": _TEXT, "required_change": _TEXT},
        }},
        "sibling_task_impact": {"type": "array"},
    },
}

IMPLEMENTER_SCHEMA: dict = {
    "type": "object",
    "required": ["status", "summary"],
    "properties": {
        "status": {"enum": ["DONE", "BLOCKED"]},
        "summary": _TEXT,
        "deviations": _STRINGS,
        "blocker": {"type": ["string", "null"]},
    },
}

CODE_REVIEW_SCHEMA: dict = {
    "type": "object",
    "required": ["verdict", "issues"],
    "properties": {
        "verdict": {"enum": ["APPROVE", "REJECT_IMPL"]},
        "issues": {"type": "array", "items": {
            "type": "object", "required": ["severity", "detail"],
            "properties": {"severity": {"enum": ["critical", "important", "minor"]}, "dimension": _TEXT,
                           "file": _TEXT, "line": {"type": ["integer", "null"]}, "detail": _TEXT},
        }},
        "mutation_test": {
            "type": "object",
            "properties": {"linguistic": _FLAG_OR_TEXT, "shared_path": _FLAG_OR_TEXT, "sibling_tasks": _STRINGS},
        },
    },
}

ROLE_SCHEMAS: dict[Role, dict] = {
    Role.LOCATOR: DIAGNOSIS_SCHEMA,
    Role.PLANNER: PLAN_SCHEMA,
    Role.PLAN_REVIEWER: PLAN_REVIEW_SCHEMA,
    Role.IMPLEMENTER: IMPLEMENTER_SCHEMA,
    Role.CODE_REVIEWER: CODE_REVIEW_SCHEMA,
}

_MISSING = object()


def _where(path) -> str:
    where = "output"
    for part in path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return where


def output_validate(*, output: dict | None = None, schema: dict, value: Any = _MISSING) -> list[str]:
    """Every way `output` breaks `schema`, one sentence each ("output.issues[0].severity: ..."); [] when valid.

    `value` is the same argument under another name, for callers holding JSON that may not be an object.
    """
    if value is not _MISSING:
        output = value
    if output is None:
        return ["output: no JSON object was returned"]
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise BackendError(f"The output schema itself is invalid: {exc.message}") from exc
    errors = sorted(validator_class(schema).iter_errors(output), key=lambda error: list(map(str, error.path)))
    problems = []
    for error in errors:
        message = error.message
        if len(message) > MESSAGE_MAX_CHARS:
            message = message[: MESSAGE_MAX_CHARS - 1] + "…"
        problems.append(f"{_where(error.path)}: {message}")
    return problems
