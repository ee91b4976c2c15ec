"""Writes of the traces app."""

from traces.services.finalize import trace_finalize
from traces.services.ingest import IngestResult, langfuse_batch_ingest, scores_ingest, spans_ingest

__all__ = [
    "IngestResult",
    "langfuse_batch_ingest",
    "scores_ingest",
    "spans_ingest",
    "trace_finalize",
]
