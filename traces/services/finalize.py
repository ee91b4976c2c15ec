"""Derived data of a trace: nodes resolved once late parents arrived, and the summary on the trace row."""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from traces.models import Score, Span, Trace
from traces.normalize import SpanRecord, resolve_nodes

_OUTCOME_WORDS = {"success": "success", "pass": "success", "passed": "success", "true": "success",
                  "failure": "failure", "fail": "failure", "failed": "failure", "false": "failure"}


def _reresolve_inferred_nodes(*, trace: Trace) -> int:
    """Spans stored before their AGENT ancestor arrived got a fallback node; give them their agent now."""
    rows = list(trace.spans.filter(trace_day=trace.first_received_day).values(
        "pk", "span_id", "parent_span_id", "kind", "node", "node_inferred", "node_fallback", "name", "start_time"))
    if not any(row["node_inferred"] for row in rows):
        return 0
    records = []
    for row in rows:
        records.append(SpanRecord(
            trace_id=trace.trace_id, span_id=row["span_id"], parent_span_id=row["parent_span_id"] or None,
            name=row["name"], kind=row["kind"], node=None if row["node_inferred"] else row["node"],
            node_fallback=row["node_fallback"], start_time=row["start_time"],
        ))
    resolve_nodes(records)
    by_span = {row["span_id"]: row for row in rows}
    changed = 0
    for record in records:
        row = by_span[record.span_id]
        if row["node_inferred"] and record.node != row["node"]:
            Span.objects.filter(pk=row["pk"], trace_day=trace.first_received_day).update(
                node=record.node, node_inferred=False)
            changed += 1
    return changed


def _outcome_from_scores(*, trace: Trace) -> tuple[str | None, float | None]:
    score = Score.objects.filter(trace=trace, name=settings.CLEAR_OUTCOME_SCORE_NAME).order_by("-created_at").first()
    if score is None:
        return None, None
    if score.string_value and score.string_value.strip().lower() in _OUTCOME_WORDS:
        return _OUTCOME_WORDS[score.string_value.strip().lower()], score.value
    if score.value is not None:
        value = max(0.0, min(1.0, score.value))
        return ("success" if value >= 0.5 else "failure"), value
    return None, None


def trace_finalize(*, trace_pk: int) -> Trace | None:
    with transaction.atomic():
        trace = Trace.objects.select_for_update().filter(pk=trace_pk).first()
        if trace is None:
            return None  # deleted meanwhile
        _reresolve_inferred_nodes(trace=trace)
        spans = list(trace.spans.filter(trace_day=trace.first_received_day).values(
            "status", "start_time", "end_time", "input_tokens", "output_tokens", "usage_is_aggregate", "cost",
            "parent_span_id", "span_id"))
        trace.span_count = len(spans)
        trace.error_count = sum(1 for s in spans if s["status"] == "error")
        trace.start_time = min((s["start_time"] for s in spans), default=None)
        trace.end_time = max((s["end_time"] for s in spans if s["end_time"]), default=None)
        counted = [s for s in spans if not s["usage_is_aggregate"]]
        trace.input_tokens = sum(s["input_tokens"] or 0 for s in counted)
        trace.output_tokens = sum(s["output_tokens"] or 0 for s in counted)
        costs = [s["cost"] for s in counted if s["cost"] is not None]
        trace.cost = sum(costs) if costs else None
        trace.status = "error" if trace.error_count else ("ok" if spans else "unset")
        if not trace.root_span_id:
            ids = {s["span_id"] for s in spans}
            roots = sorted((s for s in spans if not s["parent_span_id"] or s["parent_span_id"] not in ids),
                           key=lambda s: s["start_time"])
            trace.root_span_id = roots[0]["span_id"] if roots else ""
        if trace.outcome_source != "api":
            outcome, score = _outcome_from_scores(trace=trace)
            if outcome:
                trace.outcome, trace.score, trace.outcome_source = outcome, score, "score"
        trace.finalized_at = timezone.now()
        trace.save()
    return trace
