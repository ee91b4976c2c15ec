"""JudgeResult <-> JSON-ready dict, for the judge cache and anything else that stores results."""

from __future__ import annotations

from dataclasses import asdict, fields

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult

_RESULT_FIELDS = {f.name for f in fields(JudgeResult)}


def result_to_dict(result: JudgeResult) -> dict:
    return asdict(result)


def issue_from_dict(data: dict) -> JudgeIssue:
    return JudgeIssue(
        title=str(data.get("title", "")), detail=str(data.get("detail", "")),
        severity=data.get("severity") or "medium",
        evidence=[Evidence(span_id=str(e.get("span_id", "")), quote=str(e.get("quote", "")))
                  for e in data.get("evidence") or [] if isinstance(e, dict)],
    )


def result_from_dict(data: dict) -> JudgeResult:
    values = {key: value for key, value in data.items() if key in _RESULT_FIELDS and key != "issues"}
    result = JudgeResult(**values)
    result.issues = [issue if isinstance(issue, JudgeIssue) else issue_from_dict(issue)
                     for issue in data.get("issues") or []]
    return result
