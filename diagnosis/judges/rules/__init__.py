"""Rule judges: pure functions over a TraceView that need no model, one module per family (errors, repetition,
output, outliers, writes, closed, calls and choices — the checks that need one run per task; what each result looks like:
verdicts.py).

Each rule returns one failing JudgeResult per span it blames (issues quote the span text that shows the problem),
or a single whole-trace "pass" when it found nothing, so every rule leaves a trace of having run.
"""

from __future__ import annotations

from collections.abc import Callable

from diagnosis.judges.contract import JudgeResult, TraceView
from diagnosis.judges.rules.calls import rule_repeated_failing_call, rule_unbacked_claim
from diagnosis.judges.rules.choices import rule_unnamed_write_choice
from diagnosis.judges.rules.closed import rule_write_on_closed_object
from diagnosis.judges.rules.errors import rule_exit_code, rule_span_error, rule_tool_error
from diagnosis.judges.rules.outliers import rule_latency_outlier, rule_token_outlier
from diagnosis.judges.rules.output import rule_empty_output, rule_truncated_output
from diagnosis.judges.rules.repetition import rule_loop, rule_repeated_tool_call
from diagnosis.judges.rules.writes import (
    rule_refused_write_retried,
    rule_unconfirmed_write,
    rule_ungrounded_write_argument,
)

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
    "rule.ungrounded_write_argument": rule_ungrounded_write_argument,
    "rule.unconfirmed_write": rule_unconfirmed_write,
    "rule.refused_write_retried": rule_refused_write_retried,
    "rule.write_on_closed_object": rule_write_on_closed_object,
    "rule.repeated_failing_call": rule_repeated_failing_call,
    "rule.unbacked_claim": rule_unbacked_claim,
    "rule.unnamed_write_choice": rule_unnamed_write_choice,
}
