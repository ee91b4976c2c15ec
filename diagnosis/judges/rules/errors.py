"""Error rules. A span gets at most one of them: a non-zero exit code is reported by `rule.exit_code`, other ERROR
spans and exceptions by `rule.span_error`, and error payloads on spans whose status says OK by `rule.tool_error` (an
output starting with "Error:", or a top-level JSON `error` member: judges/text.py `error_payload`). A tool's "not
found" that the agent handled (criterion in diagnosis/judges/recovery.py) is not a failure: both rules record it as a
pass on that span, saying it was a recovered not-found.

An error's issue title names the tool (or span) and the error's pattern, its message with the values taken out
(`error_pattern`: "book_reservation returned an error: payment amount does not add up, total price is N, but paid
N"): insights group findings by that title (diagnosis/insights/statements.py), so two tools, or two different errors
of one tool, are never one insight, and one error's occurrences with different values are.
"""

from __future__ import annotations

import re

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.recovery import recovered_not_found
from diagnosis.judges.rules.verdicts import clip, rule_fail, rule_pass, rule_recovered, span_label
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


def _nonzero_exit(span: SpanView) -> bool:
    found = exit_code_of(span)
    return found is not None and found[0] != 0


def rule_exit_code(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.exit_code"
    results = []
    for span in trace.spans:
        found = exit_code_of(span)
        if found is None or found[0] == 0:
            continue
        code, quote = found
        evidence = [Evidence(span.span_id, quote)]
        if span.status_message and normalise(span.status_message) != normalise(quote):
            evidence.append(Evidence(span.span_id, clip(span.status_message)))
        issue = JudgeIssue(title=f"{span.tool_name or span.name} exited with code {code}",
                           detail=f"The tool call in {span_label(span)} failed with a non-zero exit code.",
                           severity="medium", evidence=evidence)
        results.append(rule_fail(judge, span.span_id, f"Non-zero exit code {code}.", [issue], exit_code=code))
    return results or [rule_pass(judge, "No tool call reported a non-zero exit code.")]


def _exception_messages(span: SpanView) -> list[str]:
    messages = []
    for exc in span.exceptions or []:
        text = exc.get("message") or exc.get("type") or ""
        if text:
            messages.append(str(text))
    return messages


def rule_span_error(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.span_error"
    results = []
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
        issue = JudgeIssue(
            title=f"{span_label(span)} failed: {what}",
            detail="; ".join(quotes) or f"The span ended with status {span.status}.",
            severity="high" if span.parent_span_id == "" else "medium",
            evidence=[Evidence(span.span_id, quote) for quote in quotes] or [Evidence(span.span_id, "")],
        )
        results.append(rule_fail(judge, span.span_id, f"{span_label(span)} ended in error.", [issue],
                             exception_types=types, status=span.status))
    return results or [rule_pass(judge, "No span ended in error or recorded an exception.")]


def rule_tool_error(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.tool_error"
    results = []
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
        issue = JudgeIssue(title=f"{span.tool_name or span.name} returned an error: {pattern}",
                           detail=f"The tool's output reports an error although the span's status is {span.status}.",
                           severity="medium", evidence=[Evidence(span.span_id, quote)])
        results.append(rule_fail(judge, span.span_id, "The tool returned an error payload.", [issue]))
    return results or [rule_pass(judge, "No tool output carried an error.")]
