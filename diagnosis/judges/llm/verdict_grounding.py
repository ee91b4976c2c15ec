"""Grounding of the judges' texts (grounding.py) in the trace they judged: critiques, issue titles and details, the
trace feedback and the root cause's reason.

Rules: every agent, tool, span or field named and every quoted value occurs in the trace's spans (names, nodes,
tools, input, output, status messages, exceptions, attributes) or its goal and final output; a root cause's quote
occurs in the span it cites; an issue title has at most 80 characters, names a failure and does not restate the
trace's goal (grounding.py's title rules, as for an insight's title). A reply that breaks them is asked for once
more with the reasons (the check is part of the call's check); one that still does keeps its verdict and score,
which the texts do not decide, but not the texts: an ungrounded issue is dropped (it would become a statement and
an insight), an ungrounded critique or feedback is emptied, an ungrounded root cause's reason is replaced by the
computed one (the span's name, node and status). Each replacement is recorded in the result's
details["ungrounded"] with its reason, and details["text_source"] is "computed" (else "model").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from clear.text_grounding import Evidence, grounding_evidence, grounding_problems

from .render import TraceIndex


@dataclass
class TraceGrounding:
    trace: Evidence
    spans: dict[str, Evidence] = field(default_factory=dict)


def _span_text(span) -> str:
    parts = [span.name, span.node, span.tool_name, span.model, span.status_message, span.span_id]
    for value in (span.input, span.output, span.exceptions, span.attributes):
        if value not in (None, "", [], {}):
            parts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
    return " ".join(str(p) for p in parts if p)


def trace_grounding(index: TraceIndex) -> TraceGrounding:
    texts = {span.span_id: _span_text(span) for span in index.trace.spans}
    trace = index.trace
    extra = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
             for v in (trace.goal, trace.final_output) if v not in (None, "", [], {})]
    goal = [trace.goal if isinstance(trace.goal, str) else json.dumps(trace.goal, ensure_ascii=False, default=str)
            ] if trace.goal not in (None, "", [], {}) else []
    return TraceGrounding(trace=grounding_evidence(texts=[*texts.values(), *extra], tasks=goal),
                          spans={sid: grounding_evidence(texts=[text]) for sid, text in texts.items()})


def _one_issue_problems(issue: dict, where: str, grounding: TraceGrounding) -> list[str]:
    # An issue title becomes a statement and may name an insight: like an insight's title it keeps the length limit,
    # names a failure and does not restate the task ("The chat is over.", SmolLM2-135M on tau-airline).
    return (grounding_problems(path=f"{where}.title", text=issue.get("title", ""), evidence=grounding.trace,
                               title=True)
            + grounding_problems(path=f"{where}.detail", text=issue.get("detail", ""), evidence=grounding.trace))


def _issue_problems(issues, path: str, grounding: TraceGrounding) -> list[str]:
    return [problem for position, issue in enumerate(issues or []) if isinstance(issue, dict)
            for problem in _one_issue_problems(issue, f"{path}[{position}]", grounding)]


def step_item_grounding(*, item: dict, path: str, grounding: TraceGrounding) -> list[str]:
    return (grounding_problems(path=f"{path}.critique", text=item.get("critique", ""), evidence=grounding.trace)
            + _issue_problems(item.get("issues"), f"{path}.issues", grounding))


def trace_reply_grounding(*, output: dict, grounding: TraceGrounding) -> list[str]:
    problems = grounding_problems(path="$.feedback", text=output.get("feedback", ""), evidence=grounding.trace)
    cause = output.get("root_cause")
    if isinstance(cause, dict):
        span = grounding.spans.get(str(cause.get("span_id")))
        problems += grounding_problems(path="$.root_cause.reason", text=cause.get("reason", ""),
                                       evidence=grounding.trace, quote_span=span)
    return problems + _issue_problems(output.get("issues"), "$.issues", grounding)


def grounded_step_item(*, item: dict, grounding: TraceGrounding) -> tuple[dict, list[str]]:
    """(the step verdict with its ungrounded texts dropped, the reasons)."""
    item, reasons = dict(item), []
    critique = grounding_problems(path="$.critique", text=item.get("critique", ""), evidence=grounding.trace)
    if critique:
        item["critique"], reasons = "", reasons + critique
    item["issues"], dropped = _grounded_issues(item.get("issues"), grounding)
    return item, reasons + dropped


def grounded_trace_output(*, output: dict, grounding: TraceGrounding, index: TraceIndex) -> tuple[dict, list[str]]:
    """(the trace reply with its ungrounded texts replaced or dropped, the reasons)."""
    output, reasons = dict(output), []
    feedback = grounding_problems(path="$.feedback", text=output.get("feedback", ""), evidence=grounding.trace)
    if feedback:
        output["feedback"], reasons = "", reasons + feedback
    cause = output.get("root_cause")
    if isinstance(cause, dict):
        span_id = str(cause.get("span_id"))
        problems = grounding_problems(path="$.root_cause.reason", text=cause.get("reason", ""),
                                      evidence=grounding.trace, quote_span=grounding.spans.get(span_id))
        if problems:
            output["root_cause"] = {**cause, "reason": computed_reason(index=index, span_id=span_id)}
            reasons += problems
    output["issues"], dropped = _grounded_issues(output.get("issues"), grounding)
    return output, reasons + dropped


def computed_reason(*, index: TraceIndex, span_id: str) -> str:
    """The offline root cause: which span, of which node, and how it ended."""
    span = index.by_id.get(span_id)
    if span is None:
        return f"span {span_id}"
    ended = f"; it ended with {span.status}" + (f": {span.status_message[:200]}" if span.status_message else "")
    return f"{span.kind.lower()} span \u201c{span.name}\u201d of `{span.node or 'unknown node'}`" + (
        ended if span.status and span.status.upper() != "UNSET" else "")


def _grounded_issues(issues, grounding: TraceGrounding) -> tuple[list, list[str]]:
    kept, reasons = [], []
    for position, issue in enumerate(issues or []):
        problems = _one_issue_problems(issue, f"$.issues[{position}]", grounding) if isinstance(issue, dict) else []
        if problems:
            reasons += problems
        else:
            kept.append(issue)
    return kept, reasons


def text_source_details(reasons: list[str]) -> dict:
    return {"text_source": "computed", "ungrounded": reasons[:20]} if reasons else {"text_source": "model"}
