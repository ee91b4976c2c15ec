"""Outlier rules: a span's duration or token count far above its node's, against the medians and MADs of the run
(`node_stats_compute`, computed once per run from every judged span).

An outlier is a symptom, not a failure: on a trace whose recorded outcome is success the finding is kept (so the
insight's lift can compare failing with succeeding traces) under a passing verdict."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from statistics import median

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.rules.verdicts import rule_fail, rule_noted, rule_pass, rule_skip, span_label

# Iglewicz & Hoaglin: |modified z| > 3.5 flags an outlier; fewer than 8 samples give no usable baseline.
OUTLIER_Z = 3.5
OUTLIER_MIN_SAMPLES = 8
# A tight baseline (MAD of a few tokens) makes +11% a z of 5; "far above" also needs the value to be at least
# this many times the median.
OUTLIER_MIN_RATIO = 2.0


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
        return [rule_skip(judge, "No per-node baseline for this run.")]
    results = []
    for span in trace.spans:
        value = value_of(span)
        baseline = (stats.get(stats_key(span.node, span.kind, span.tool_name)) or {}).get(measure)
        if value is None or not baseline:
            continue
        z = _z(value, baseline)
        if z is None or z <= OUTLIER_Z or math.isnan(z) or value < OUTLIER_MIN_RATIO * baseline["median"]:
            continue
        # "202 tokens", not "tokens 202 tokens": the measure is named only when the unit does not name it.
        amount = f"{value:.0f} {unit}" if unit == measure else f"{measure} {value:.0f} {unit}"
        issue = JudgeIssue(
            title=f"{span_label(span)}: {amount} is far above the node's median",
            detail=f"{value:.0f} {unit} against a median of {baseline['median']:.0f} {unit} "
                   f"(MAD {baseline['mad']:.0f}, robust z {z:.1f}, {baseline['n']} spans).",
            severity="low" if z < 2 * OUTLIER_Z else "medium", evidence=[Evidence(span.span_id, "")],
        )
        details = {"value": value, "median": baseline["median"], "mad": baseline["mad"], "z": round(z, 2)}
        if trace.outcome == "success":
            results.append(rule_noted(judge, span.span_id, f"{measure.capitalize()} outlier for its node; the run "
                                                          "succeeded, so it is no failure.", [issue], **details))
        else:
            results.append(rule_fail(judge, span.span_id, f"{measure.capitalize()} outlier for its node.", [issue],
                                     **details))
    return results or [rule_pass(judge, f"No span's {measure} stood out for its node.")]


def rule_latency_outlier(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.latency_outlier"
    if trace.synthetic_timing:
        return [rule_skip(judge, "The trace's timestamps are synthetic: latency is no evidence.")]
    return _outliers(trace, stats, judge=judge, measure="duration", value_of=duration_ms, unit="ms")


def rule_token_outlier(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    return _outliers(trace, stats, judge="rule.token_outlier", measure="tokens", value_of=span_tokens, unit="tokens")
