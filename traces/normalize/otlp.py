"""Decode OTLP/HTTP trace exports (protobuf or JSON) into SpanRecords.

    batch = decode_export_request(body=raw_bytes, content_type=request.content_type)
    batch.spans      # list[SpanRecord], nodes not yet resolved (see nodes.resolve_nodes)
    batch.rejected   # [SpanRejection(index, message, reason, trace_id)] for spans without valid ids or times

Raises `OtlpDecodeError(message, kind)` (otlp_errors.py) when the body as a whole cannot be used; `kind` is one of
`ERROR_KINDS`. The body must already be decompressed. The decoders: otlp_protobuf.py and otlp_json.py; both map each
span with mapping.build_span_record.
"""

from __future__ import annotations

from .otlp_errors import UNSUPPORTED_MEDIA_TYPE, OtlpDecodeError
from .otlp_json import decode_json
from .otlp_protobuf import decode_protobuf
from .records import OtlpBatch


def content_kind(content_type: str) -> str | None:
    """'protobuf', 'json' or None for a Content-Type header value (charset and other parameters ignored)."""
    ct = (content_type or "").split(";", 1)[0].strip().lower()
    if "protobuf" in ct:
        return "protobuf"
    if ct.endswith("json"):
        return "json"
    return None


def decode_export_request(*, body: bytes, content_type: str) -> OtlpBatch:
    """Decode an OTLP/HTTP `ExportTraceServiceRequest` (already decompressed)."""
    if not isinstance(body, (bytes, bytearray)):
        body = bytes(body)  # memoryview etc.
    kind = content_kind(content_type)
    if kind == "protobuf":
        return decode_protobuf(bytes(body))
    if kind == "json":
        return decode_json(body)
    raise OtlpDecodeError(
        f"Unsupported Content-Type {content_type!r}: send application/x-protobuf or application/json.",
        UNSUPPORTED_MEDIA_TYPE,
    )
