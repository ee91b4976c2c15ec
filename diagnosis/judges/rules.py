"""Rule judges: pure functions over a TraceView that need no model.

Each rule returns one failing JudgeResult per span it blames (issues quote the span text that shows the problem),
or a single whole-trace "pass" when it found nothing, so every rule leaves a trace of having run. A span gets at
most one of the error rules: a non-zero exit code is reported by `rule.exit_code`, other ERROR spans and exceptions
by `rule.span_error`, and error payloads on spans whose status says OK by `rule.tool_error`. A tool's "not found"
that the agent handled (criterion in diagnosis/judges/recovery.py) is not a failure: both rules record it as a pass
on that span, saying it was a recovered not-found.

Empty output: a span is empty only when it recorded an output that says nothing (blank text, message envelopes with
no text and no tool call); an assistant turn that calls tools, in any of the formats diagnosis/judges/text.py reads
(OpenAI chat `tool_calls`, GenAI `tool_call` parts, OpenInference flattened tool calls, Anthropic `tool_use`
blocks), is output. An output that was never recorded is not empty either.

Repetition: `rule.repeated_tool_call` reports the same tool called with identical, non-empty arguments at least
REPEATED_CALL_THRESHOLD times under one parent (a single retry after a back-off is normal, so 2 is not reported).
`rule.loop` reports a speaker (agent, tool without arguments, or model) emitting the identical non-empty message in
back-to-back sibling spans. The same message recurring after other turns is not reported: in group chats that is
mostly a harness's canned reply ("There is no code from the last 1 message…") or a re-run that printed the same
output, neither evidence of a fault on its own; the LLM trace judge sees those.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from statistics import median
from typing import Any

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.recovery import Recovery, recovered_not_found
from diagnosis.judges.text import dump, error_payload, finish_reasons_of, has_content, maybe_json, normalise, plain_text

RULES_VERSION = "rules-2"  # 2: tool-call turns in every format are output; recovered not-founds pass
REPEATED_CALL_THRESHOLD = 3
# Iglewicz & Hoaglin: |modified z| > 3.5 flags an outlier; fewer than 8 samples give no usable baseline.
OUTLIER_Z = 3.5
OUTLIER_MIN_SAMPLES = 8
_QUOTE_MAX = 200

_EXIT_CODE = re.compile(r"\bexit[ _]?(?:code|status)\b\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
_EXIT_KEYS = ("exit_code", "exitcode", "exitCode", "returncode", "return_code", "exit_status")
_TRUNCATION_REASONS = {"length", "max_tokens", "max_output_tokens"}


def _fail(judge: str, span_id: str | None, critique: str, issues: list[JudgeIssue], **details) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=span_id, status="ok", score=0.0, verdict="fail",
                       critique=critique, issues=issues, prompt_version=RULES_VERSION, details=details)


def _pass(judge: str, critique: str) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=None, status="ok", score=1.0, verdict="pass", critique=critique,
                       prompt_version=RULES_VERSION)


def _recovered(judge: str, span: SpanView, recovery: Recovery) -> JudgeResult:
    critique = (f"Recovered not-found: {_label(span)} found nothing (\u201c{recovery.quote}\u201d) and the agent went "
                f"on with {_label(recovery.next_span)}; the run did not fail.")
    return JudgeResult(judge=judge, target_span_id=span.span_id, status="ok", score=1.0, verdict="pass",
                       critique=critique, prompt_version=RULES_VERSION,
                       details={"recovered_not_found": True, "error": recovery.quote,
                                "next_span_id": recovery.next_span.span_id})


def _skip(judge: str, reason: str) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=None, status="skipped", critique=reason,
                       prompt_version=RULES_VERSION)


def _clip(text: str) -> str:
    text = text.strip()
    return text[:_QUOTE_MAX]


def _label(span: SpanView) -> str:
    return f"{span.name} ({span.node})" if span.node and span.node not in span.name else span.name


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
            evidence.append(Evidence(span.span_id, _clip(span.status_message)))
        issue = JudgeIssue(title=f"{span.tool_name or span.name} exited with code {code}",
                           detail=f"The tool call in {_label(span)} failed with a non-zero exit code.",
                           severity="medium", evidence=evidence)
        results.append(_fail(judge, span.span_id, f"Non-zero exit code {code}.", [issue], exit_code=code))
    return results or [_pass(judge, "No tool call reported a non-zero exit code.")]


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
            results.append(_recovered(judge, span, recovery))
            continue
        quotes = []
        if span.status_message:
            quotes.append(_clip(span.status_message))
        for message in _exception_messages(span):
            if not any(normalise(message) in normalise(q) or normalise(q) in normalise(message) for q in quotes):
                quotes.append(_clip(message))
        types = [str(exc.get("type")).rsplit(".", 1)[-1] for exc in span.exceptions or [] if exc.get("type")]
        what = types[0] if types else ("error status" if span.status == "error" else "exception")
        issue = JudgeIssue(
            title=f"{_label(span)} failed: {what}",
            detail="; ".join(quotes) or f"The span ended with status {span.status}.",
            severity="high" if span.parent_span_id == "" else "medium",
            evidence=[Evidence(span.span_id, quote) for quote in quotes] or [Evidence(span.span_id, "")],
        )
        results.append(_fail(judge, span.span_id, f"{_label(span)} ended in error.", [issue],
                             exception_types=types, status=span.status))
    return results or [_pass(judge, "No span ended in error or recorded an exception.")]


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
            results.append(_recovered(judge, span, recovery))
            continue
        issue = JudgeIssue(title=f"{span.tool_name or span.name} returned an error",
                           detail=f"The tool's output reports an error although the span's status is {span.status}.",
                           severity="medium", evidence=[Evidence(span.span_id, quote)])
        results.append(_fail(judge, span.span_id, "The tool returned an error payload.", [issue]))
    return results or [_pass(judge, "No tool output carried an error.")]


def rule_repeated_tool_call(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.repeated_tool_call"
    groups: dict[tuple[str, str, str], list[SpanView]] = defaultdict(list)
    for span in trace.spans:
        if span.kind != "TOOL" or span.input in (None, "", {}, []):
            continue
        arguments = dump(maybe_json(span.input))
        groups[(span.parent_span_id, span.tool_name or span.name, arguments)].append(span)
    ids = {span.span_id for span in trace.spans}
    by_parent: dict[str | None, list[JudgeIssue]] = defaultdict(list)
    counts: dict[str | None, int] = defaultdict(int)
    for (parent_id, tool, arguments), spans in groups.items():
        parent = parent_id if parent_id in ids else None
        if len(spans) < REPEATED_CALL_THRESHOLD:
            continue
        failed = sum(1 for s in spans if s.status == "error" or error_payload(s.output))
        by_parent[parent].append(JudgeIssue(
            title=f"{tool} called {len(spans)} times with identical arguments",
            detail=f"{tool}({arguments}) was sent {len(spans)} times by the same caller"
                   + (f"; {failed} of the calls failed" if failed else "") + ".",
            severity="high" if len(spans) >= 5 or failed == len(spans) else "medium",
            evidence=[Evidence(s.span_id, dump(maybe_json(s.input))) for s in spans],
        ))
        counts[parent] = max(counts[parent], len(spans))
    results = [
        _fail(judge, parent, "The same tool call was repeated instead of changing course.",
              issues, max_repeats=counts[parent])
        for parent, issues in by_parent.items()
    ]
    return results or [_pass(judge, f"No tool call was repeated {REPEATED_CALL_THRESHOLD}+ times identically.")]


def _speaker(span: SpanView) -> tuple[str, str]:
    if span.kind == "TOOL":
        return span.kind, span.tool_name or span.name
    return span.kind, span.node or span.name


def rule_loop(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.loop"
    siblings: dict[str, list[SpanView]] = defaultdict(list)
    for span in trace.spans:
        siblings[span.parent_span_id].append(span)  # trace.spans is in start order
    results = []
    for children in siblings.values():
        i = 0
        while i < len(children):
            first = children[i]
            message = _loop_message(first)
            j = i + 1
            while message and j < len(children) and _speaker(children[j]) == _speaker(first) \
                    and _loop_message(children[j]) == message:
                j += 1
            if j - i >= 2:
                repeated = children[i:j]
                quote = _clip(plain_text(first.output))
                issue = JudgeIssue(
                    title=f"{_speaker(first)[1]} repeated the same message {len(repeated)} times in a row",
                    detail="Back-to-back identical messages from one speaker: the conversation is not progressing.",
                    severity="high" if len(repeated) >= 3 else "medium",
                    evidence=[Evidence(s.span_id, quote) for s in repeated],
                )
                results.append(_fail(judge, repeated[1].span_id, "A speaker repeated itself back to back.", [issue],
                                     repeats=len(repeated), speaker=_speaker(first)[1]))
            i = j
    return results or [_pass(judge, "No speaker repeated the same message back to back.")]


def _loop_message(span: SpanView) -> str:
    # Tool calls with arguments are rule.repeated_tool_call's; their identical results are not a second finding.
    if span.kind == "TOOL" and span.input not in (None, "", {}, []):
        return ""
    return normalise(plain_text(span.output))


def _is_empty(value: Any) -> bool:
    # Not recorded (None) is not empty: many instrumentations only record content when asked to.
    return maybe_json(value) is not None and not has_content(value)


def rule_empty_output(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.empty_output"
    results = []
    for span in trace.spans:
        if span.kind not in ("LLM", "AGENT", "TOOL") or span.status == "error" or not _is_empty(span.output):
            continue
        issue = JudgeIssue(title=f"{_label(span)} produced an empty output",
                           detail="The span finished without error but its output is empty.", severity="medium",
                           evidence=[Evidence(span.span_id, "")])
        results.append(_fail(judge, span.span_id, "Empty output.", [issue]))
    return results or [_pass(judge, "No span produced an empty output.")]


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
        issue = JudgeIssue(title=f"{_label(span)} was cut off at the token limit",
                           detail=f"finish_reason={cut[0]}: the model stopped because it ran out of output tokens.",
                           severity="medium", evidence=[Evidence(span.span_id, cut[0])])
        results.append(_fail(judge, span.span_id, "Truncated output.", [issue], finish_reason=cut[0]))
    return results or [_pass(judge, "No model output was truncated.")]


# ---------------------------------------------------------------------------------------------------------------
# Outliers per node, against the medians and MADs of the run (see node_stats_compute).


def stats_key(node: str, kind: str, tool: str) -> str:
    return f"{node}|{kind}|{tool}"


def duration_ms(span: SpanView) -> float | None:
    if span.end_time is None:
        return None
    return (span.end_time - span.start_time).total_seconds() * 1000


def span_tokens(span: SpanView) -> int | None:
    if span.input_tokens is None and span.output_tokens is None:
        return None
    return (span.input_tokens or 0) + (span.output_tokens or 0)


def _robust(values: list[float]) -> dict:
    med = median(values)
    mad = median(abs(v - med) for v in values)
    return {"median": med, "mad": mad, "n": len(values)}


def node_stats_compute(rows: Iterable[tuple[str, str, str, float | None, int | None]]) -> dict:
    """{stats_key: {"duration": {median, mad, n}, "tokens": {...}}} from (node, kind, tool, duration_ms, tokens)."""
    durations: dict[str, list[float]] = defaultdict(list)
    tokens: dict[str, list[float]] = defaultdict(list)
    for node, kind, tool, duration, token_count in rows:
        key = stats_key(node, kind, tool)
        if duration is not None:
            durations[key].append(float(duration))
        if token_count is not None and kind == "LLM":
            tokens[key].append(float(token_count))
    stats: dict[str, dict] = {}
    for key, values in durations.items():
        stats.setdefault(key, {})["duration"] = _robust(values)
    for key, values in tokens.items():
        stats.setdefault(key, {})["tokens"] = _robust(values)
    return stats


def _z(value: float, baseline: dict) -> float | None:
    if baseline["n"] < OUTLIER_MIN_SAMPLES or baseline["mad"] <= 0:
        return None
    return 0.6745 * (value - baseline["median"]) / baseline["mad"]


def _outliers(trace: TraceView, stats: dict | None, *, judge: str, measure: str,
              value_of: Callable[[SpanView], float | None], unit: str) -> list[JudgeResult]:
    if not stats:
        return [_skip(judge, "No per-node baseline for this run.")]
    results = []
    for span in trace.spans:
        value = value_of(span)
        baseline = (stats.get(stats_key(span.node, span.kind, span.tool_name)) or {}).get(measure)
        if value is None or not baseline:
            continue
        z = _z(value, baseline)
        if z is None or z <= OUTLIER_Z or math.isnan(z):
            continue
        issue = JudgeIssue(
            title=f"{_label(span)}: {measure} {value:.0f} {unit} is far above the node's median",
            detail=f"{value:.0f} {unit} against a median of {baseline['median']:.0f} {unit} "
                   f"(MAD {baseline['mad']:.0f}, robust z {z:.1f}, {baseline['n']} spans).",
            severity="low" if z < 2 * OUTLIER_Z else "medium", evidence=[Evidence(span.span_id, "")],
        )
        results.append(_fail(judge, span.span_id, f"{measure.capitalize()} outlier for its node.", [issue],
                             value=value, median=baseline["median"], mad=baseline["mad"], z=round(z, 2)))
    return results or [_pass(judge, f"No span's {measure} stood out for its node.")]


def rule_latency_outlier(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.latency_outlier"
    if trace.synthetic_timing:
        return [_skip(judge, "The trace's timestamps are synthetic: latency is no evidence.")]
    return _outliers(trace, stats, judge=judge, measure="duration", value_of=duration_ms, unit="ms")


def rule_token_outlier(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    return _outliers(trace, stats, judge="rule.token_outlier", measure="tokens", value_of=span_tokens, unit="tokens")


RULES: dict[str, Callable[[TraceView, dict | None], list[JudgeResult]]] = {
    "rule.span_error": rule_span_error,
    "rule.tool_error": rule_tool_error,
    "rule.exit_code": rule_exit_code,
    "rule.repeated_tool_call": rule_repeated_tool_call,
    "rule.loop": rule_loop,
    "rule.empty_output": rule_empty_output,
    "rule.truncated_output": rule_truncated_output,
    "rule.latency_outlier": rule_latency_outlier,
    "rule.token_outlier": rule_token_outlier,
}
