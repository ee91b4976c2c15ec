"""Error rules. A span gets at most one of them: a non-zero exit code is reported by `rule.exit_code`, other ERROR
spans and exceptions by `rule.span_error`, and error payloads on spans whose status says OK by `rule.tool_error` (an
output starting with "Error:", or a top-level JSON `error` member: judges/text.py `error_payload`). A tool's "not
found" that the agent handled (criterion in diagnosis/judges/recovery.py) is not a failure: both rules record it as a
pass on that span, saying it was a recovered not-found. An error the run later recovered from (recovery.py
`error_recovery`: the call corrected, or the entity found another way) keeps its issue, at low severity, under a
passing verdict flagged `recovered` on the failed call (verdicts.py `rule_recovered_error`).

An error's issue title names the tool (or span) and the error's pattern, its message with the values taken out
(`error_pattern`: "book_reservation returned an error: payment amount does not add up, total price is N, but paid
N"): insights group findings by that title (diagnosis/insights/statements.py), so two tools, or two different errors
of one tool, are never one insight, and one error's occurrences with different values are.

A failing tool call is blamed on the step that decided it (judges/decision.py `deciding_step`: the LLM or AGENT span
that issued the call): the result targets that step, so the statement's node is the deciding agent, and its
evidence cites the step, the call's arguments and the tool's reply on the tool span (where those quotes occur).
The calls one step issued are one result (`merge_by_target`). A call whose decider is unknown targets itself.
"""

from __future__ import annotations

import re

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.decision import TraceIndex, call_evidence, call_said, deciding_step
from diagnosis.judges.recovery import recovered_not_found
from diagnosis.judges.rules.verdicts import (
    clip, merge_by_target, rule_fail, rule_pass, rule_recovered, rule_recovered_error, span_label,
)
from diagnosis.judges.text import error_pattern, error_payload, maybe_json, normalise, plain_text

_EXIT_CODE = re.compile(r"\bexit[ _]?(?:code|status)\b\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
_EXIT_KEYS = ("exit_code", "exitcode", "exitCode", "returncode", "return_code", "exit_status")


def exit_code_of(span: SpanView) -> tuple[int, str] | None:
    """The first exit code a tool span reports, with the text that says so."""
    if span.kind != "TOOL":
        return None
    output = maybe_json(span.output)
    if isinstance(output, dict):
        for key in _EXIT_KEYS:
            value = output.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value, f'"{key}": {value}'
    for text in (plain_text(span.output), span.status_message):
        match = _EXIT_CODE.search(text or "")
        if match:
            return int(match.group(1)), match.group(0)
    for key, value in span.attributes.items():
        if key.endswith(("exit_code", "exit.code", "exitcode")) and isinstance(value, (int, str)):
            try:
                return int(value), str(value)
            except ValueError:
                continue
    return None


def _blamed(span: SpanView, trace: TraceView, index: TraceIndex, evidence: list[Evidence],
            detail: str) -> tuple[str, list[Evidence], str, dict]:
    """(target, evidence, detail, details) of a finding on `span`: a tool call's go to the step that decided it."""
    step = deciding_step(span, trace, index)
    if step is None:
        return span.span_id, evidence, detail, {}
    cited = call_evidence(span, step)
    quotes = {(e.span_id, e.quote) for e in cited}
    evidence = cited + [e for e in evidence if (e.span_id, e.quote) not in quotes]
    return step.span_id, evidence, f"{call_said(span, step)} {detail}".strip(), {"call_span_ids": [span.span_id]}


def _nonzero_exit(span: SpanView) -> bool:
    found = exit_code_of(span)
    return found is not None and found[0] != 0


def rule_exit_code(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.exit_code"
    results, index = [], TraceIndex(trace)
    for span in trace.spans:
        found = exit_code_of(span)
        if found is None or found[0] == 0:
            continue
        code, quote = found
        evidence = [Evidence(span.span_id, quote)]
        if span.status_message and normalise(span.status_message) != normalise(quote):
            evidence.append(Evidence(span.span_id, clip(span.status_message)))
        target, evidence, detail, blame = _blamed(
            span, trace, index, evidence, f"The tool call in {span_label(span)} failed with a non-zero exit code.")
        issue = JudgeIssue(title=f"{span.tool_name or span.name} exited with code {code}", detail=detail,
                           severity="medium", evidence=evidence)
        results.append(rule_fail(judge, target, f"Non-zero exit code {code}.", [issue], exit_code=code, **blame))
    return merge_by_target(results) or [rule_pass(judge, "No tool call reported a non-zero exit code.")]


def _exception_messages(span: SpanView) -> list[str]:
    messages = []
    for exc in span.exceptions or []:
        text = exc.get("message") or exc.get("type") or ""
        if text:
            messages.append(str(text))
    return messages


def rule_span_error(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.span_error"
    results, index = [], TraceIndex(trace)
    for span in trace.spans:
        if span.status != "error" and not span.exceptions:
            continue
        if _nonzero_exit(span):
            continue  # rule.exit_code reports it, with the exit code as the evidence
        recovery = recovered_not_found(span, trace)
        if recovery is not None:
            results.append(rule_recovered(judge, span, recovery))
            continue
        quotes = []
        if span.status_message:
            quotes.append(clip(span.status_message))
        for message in _exception_messages(span):
            if not any(normalise(message) in normalise(q) or normalise(q) in normalise(message) for q in quotes):
                quotes.append(clip(message))
        types = [str(exc.get("type")).rsplit(".", 1)[-1] for exc in span.exceptions or [] if exc.get("type")]
        what = types[0] if types else ("error status" if span.status == "error" else "exception")
        # The first message says which error it was: "failed: error status" alone would make every failure of a
        # step one pattern, whatever went wrong.
        pattern = error_pattern(quotes[0]) if quotes else ""
        if pattern and normalise(what) not in normalise(pattern):
            what = f"{what}: {pattern}" if types else pattern
        elif pattern:
            what = pattern
        target, evidence, detail, blame = _blamed(
            span, trace, index, [Evidence(span.span_id, quote) for quote in quotes] or [Evidence(span.span_id, "")],
            "" if span.kind == "TOOL" else "; ".join(quotes))  # a call's detail quotes its reply already
        issue = JudgeIssue(
            title=f"{span_label(span)} failed: {what}",
            detail=detail or f"The span ended with status {span.status}.",
            severity="high" if span.parent_span_id == "" else "medium",
            evidence=evidence,
        )
        results.append(rule_recovered_error(rule_fail(judge, target, f"{span_label(span)} ended in error.", [issue],
                                                      exception_types=types, status=span.status, **blame),
                                            span, trace))
    return merge_by_target(results) or [rule_pass(judge, "No span ended in error or recorded an exception.")]


def rule_tool_error(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.tool_error"
    results, index = [], TraceIndex(trace)
    for span in trace.spans:
        if span.kind != "TOOL" or span.status == "error" or span.exceptions or _nonzero_exit(span):
            continue
        quote = error_payload(span.output)
        if quote is None:
            continue
        recovery = recovered_not_found(span, trace)
        if recovery is not None:
            results.append(rule_recovered(judge, span, recovery))
            continue
        pattern = error_pattern(quote) or "error"
        target, evidence, detail, blame = _blamed(
            span, trace, index, [Evidence(span.span_id, quote)],
            f"The tool's output reports an error although the span's status is {span.status}.")
        issue = JudgeIssue(title=f"{span.tool_name or span.name} returned an error: {pattern}", detail=detail,
                           severity="medium", evidence=evidence)
        results.append(rule_recovered_error(rule_fail(judge, target, "The tool returned an error payload.", [issue],
                                                      **blame), span, trace))
    return merge_by_target(results) or [rule_pass(judge, "No tool output carried an error.")]
