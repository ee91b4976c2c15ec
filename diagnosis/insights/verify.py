"""Evidence kept for an insight is verified again against the stored spans: the cited span must exist in the trace
and the quote (whitespace collapsed, case folded) must occur in its text, exactly as when the feedback was written
(diagnosis/services/evidence.py). An empty quote is a bare citation of an existing span."""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.judges.contract import SpanView
from diagnosis.judges.text import normalise
from diagnosis.services.evidence import span_text
from traces.models import Span
from traces.selectors import trace_days_for

_FIELDS = ("trace_id", "span_id", "parent_span_id", "name", "kind", "node", "start_time", "end_time", "input",
           "output", "status", "status_message", "attributes", "exceptions")
_CHUNK = 500


@dataclass
class VerifiedSpans:
    texts: dict[tuple[int, str], str]

    def check(self, trace_pk: int, span_id: str, quote: str) -> bool:
        text = self.texts.get((trace_pk, span_id))
        if text is None:
            return False
        wanted = normalise(quote or "")
        return not wanted or wanted in text


def evidence_verified(*, project_id: int, pairs: set[tuple[int, str]]) -> VerifiedSpans:
    by_trace: dict[int, set[str]] = {}
    for trace_pk, span_id in pairs:
        by_trace.setdefault(trace_pk, set()).add(span_id)
    texts: dict[tuple[int, str], str] = {}
    traces = sorted(by_trace)
    for start in range(0, len(traces), _CHUNK):
        chunk = traces[start:start + _CHUNK]
        span_ids = set().union(*(by_trace[t] for t in chunk))
        days = trace_days_for(project=project_id, trace_pks=chunk)  # only their days' span partitions
        spans = Span.objects.filter(trace_id__in=chunk, trace_day__in=days, span_id__in=span_ids)
        for row in spans.values(*_FIELDS):
            if row["span_id"] not in by_trace[row["trace_id"]]:
                continue
            view = SpanView(span_id=row["span_id"], parent_span_id=row["parent_span_id"] or "", name=row["name"],
                            kind=row["kind"], node=row["node"], start_time=row["start_time"],
                            end_time=row["end_time"], input=row["input"], output=row["output"],
                            status=row["status"], status_message=row["status_message"],
                            attributes=row["attributes"] or {}, exceptions=row["exceptions"] or [])
            texts[(row["trace_id"], row["span_id"])] = span_text(view)
    return VerifiedSpans(texts=texts)
