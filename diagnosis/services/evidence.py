"""Evidence verification: a quote must be found in the stored text of the span it cites, or it is dropped.

A span's text is its input, output, status message, exceptions and attribute values (JSON strings inside them
parsed too), compared with whitespace collapsed and case folded. An empty quote is a bare citation of the span and
is kept when the span exists; a citation of a span not in the trace is dropped like a false quote.
"""

from __future__ import annotations

from diagnosis.judges.contract import JudgeResult, SpanView, TraceView
from diagnosis.judges.text import normalise, value_text


def span_text(span: SpanView) -> str:
    parts = [
        value_text(span.input),
        value_text(span.output),
        span.status_message or "",
        value_text(span.exceptions) if span.exceptions else "",
        value_text(span.attributes) if span.attributes else "",
    ]
    return normalise("\n".join(part for part in parts if part))


def span_texts(trace: TraceView) -> dict[str, str]:
    return {span.span_id: span_text(span) for span in trace.spans}


def evidence_verify(*, trace: TraceView, results: list[JudgeResult], texts: dict[str, str] | None = None) -> int:
    """Drop unverifiable evidence from the results in place; returns how many quotes were dropped."""
    texts = texts if texts is not None else span_texts(trace)
    dropped = 0
    for result in results:
        for issue in result.issues:
            kept = []
            for evidence in issue.evidence:
                text = texts.get(evidence.span_id)
                quote = normalise(evidence.quote or "")
                if text is not None and (not quote or quote in text):
                    kept.append(evidence)
                else:
                    dropped += 1
            issue.evidence = kept
    return dropped
