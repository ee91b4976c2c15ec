"""Pure-Python normalisation of OTLP trace exports and Langfuse ingestion batches into SpanRecords.

No Django, no database: the storage layer persists what these functions return.

    from traces.normalize import decode_export_request, resolve_nodes, normalize_ingestion_batch
"""

from .langfuse import LangfuseBatchError, normalize_ingestion_batch
from .nodes import resolve_nodes
from .otlp import decode_export_request
from .otlp_errors import ERROR_KINDS, OtlpDecodeError
from .records import (
    KINDS,
    LangfuseBatch,
    OtlpBatch,
    ScoreRecord,
    SpanRecord,
    SpanRejection,
    SpanUpdate,
    TraceUpdate,
)

__all__ = [
    "ERROR_KINDS",
    "KINDS",
    "LangfuseBatch",
    "LangfuseBatchError",
    "OtlpBatch",
    "OtlpDecodeError",
    "ScoreRecord",
    "SpanRecord",
    "SpanRejection",
    "SpanUpdate",
    "TraceUpdate",
    "decode_export_request",
    "normalize_ingestion_batch",
    "resolve_nodes",
]
