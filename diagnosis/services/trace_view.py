"""Building the judges' input from stored rows: a TraceView is all a judge ever sees of a trace."""

from __future__ import annotations

from diagnosis.judges.contract import SpanView, TraceView
from diagnosis.judges.tool_calls import tool_spans_infer
from traces.models import Span, Trace

_SPAN_FIELDS = (
    "span_id", "parent_span_id", "name", "kind", "node", "start_time", "end_time", "model", "tool_name", "input",
    "output", "status", "status_message", "input_tokens", "output_tokens", "attributes", "events", "exceptions",
    "resource",
)


def _truthy(value) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes"))


def _synthetic(root: dict | None, spans: list[dict]) -> bool:
    candidates = [root] if root else []
    candidates += spans[:1]
    for row in candidates:
        attributes, resource = row.get("attributes") or {}, row.get("resource") or {}
        if str(attributes.get("clear.timing") or resource.get("clear.timing") or "").lower() == "synthetic":
            return True
        if _truthy(attributes.get("dataset.synthetic_timing")) or _truthy(resource.get("dataset.synthetic_timing")):
            return True
    return False


def trace_view_build(*, trace: Trace) -> TraceView:
    """Spans in start order; goal and final output from the root span; timing marked synthetic when it says so;
    untyped spans that are a model's tool calls seen as TOOL spans (judges/tool_calls.py)."""
    rows = list(Span.objects.filter(trace=trace, trace_day=trace.first_received_day).order_by("start_time", "pk")
                .values(*_SPAN_FIELDS))
    ids = {row["span_id"] for row in rows}
    root = next((row for row in rows if row["span_id"] == trace.root_span_id), None)
    if root is None:
        root = next((row for row in rows if not row["parent_span_id"] or row["parent_span_id"] not in ids), None)
    spans = [SpanView(**{name: row[name] for name in _SPAN_FIELDS if name != "resource"}) for row in rows]
    for span in spans:
        span.parent_span_id = span.parent_span_id or ""
        span.attributes = span.attributes or {}
        span.events = span.events or []
        span.exceptions = span.exceptions or []
    tool_spans_infer(spans)  # tools recorded as plain spans (Langfuse `@observe()`): the judges see them as tools
    return TraceView(
        trace_id=trace.trace_id,
        spans=spans,
        goal=root["input"] if root else None,
        final_output=root["output"] if root else None,
        outcome=trace.outcome,
        score=trace.score,
        task_id=trace.task_id,
        release=trace.release,
        synthetic_timing=_synthetic(root, rows),
    )
