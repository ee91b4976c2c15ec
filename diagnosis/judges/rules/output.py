"""Output rules. Empty output: a span is empty only when it recorded an output that says nothing (blank text,
message envelopes with no text and no tool call); an assistant turn that calls tools, in any of the formats
diagnosis/judges/text.py reads (OpenAI chat `tool_calls`, GenAI `tool_call` parts, OpenInference flattened tool
calls, Anthropic `tool_use` blocks), is output. An output that was never recorded is not empty either. Truncated
output: a model span whose finish reason says it ran out of output tokens.
"""

from __future__ import annotations

from typing import Any

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.rules.verdicts import rule_fail, rule_pass, span_label
from diagnosis.judges.text import finish_reasons_of, has_content, maybe_json

_TRUNCATION_REASONS = {"length", "max_tokens", "max_output_tokens"}


def _is_empty(value: Any) -> bool:
    # Not recorded (None) is not empty: many instrumentations only record content when asked to.
    return maybe_json(value) is not None and not has_content(value)


def rule_empty_output(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.empty_output"
    results = []
    for span in trace.spans:
        if span.kind not in ("LLM", "AGENT", "TOOL") or span.status == "error" or not _is_empty(span.output):
            continue
        issue = JudgeIssue(title=f"{span_label(span)} produced an empty output",
                           detail="The span finished without error but its output is empty.", severity="medium",
                           evidence=[Evidence(span.span_id, "")])
        results.append(rule_fail(judge, span.span_id, "Empty output.", [issue]))
    return results or [rule_pass(judge, "No span produced an empty output.")]


def finish_reasons(span: SpanView) -> list[str]:
    reasons: list[str] = []
    for key in ("gen_ai.response.finish_reasons", "llm.finish_reason", "gen_ai.response.finish_reason"):
        value = maybe_json(span.attributes.get(key))
        if isinstance(value, str):
            reasons.append(value)
        elif isinstance(value, list):
            reasons += [str(v) for v in value]
    return reasons + finish_reasons_of(span.output)


def rule_truncated_output(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.truncated_output"
    results = []
    for span in trace.spans:
        if span.kind != "LLM":
            continue
        cut = [r for r in finish_reasons(span) if r.lower() in _TRUNCATION_REASONS]
        if not cut:
            continue
        issue = JudgeIssue(title=f"{span_label(span)} was cut off at the token limit",
                           detail=f"finish_reason={cut[0]}: the model stopped because it ran out of output tokens.",
                           severity="medium", evidence=[Evidence(span.span_id, cut[0])])
        results.append(rule_fail(judge, span.span_id, "Truncated output.", [issue], finish_reason=cut[0]))
    return results or [rule_pass(judge, "No model output was truncated.")]
