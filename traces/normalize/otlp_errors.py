"""What can be wrong with an OTLP trace export as a whole: the error kinds and the messages that say what to fix."""

from __future__ import annotations

UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
INVALID_PROTOBUF = "invalid_protobuf"
INVALID_JSON = "invalid_json"
INVALID_STRUCTURE = "invalid_structure"
LOGS_NOT_TRACES = "logs_not_traces"
METRICS_NOT_TRACES = "metrics_not_traces"
ERROR_KINDS = (
    UNSUPPORTED_MEDIA_TYPE,  # -> HTTP 415
    INVALID_PROTOBUF,  # garbage / truncated protobuf -> 400
    INVALID_JSON,  # not UTF-8 / not JSON -> 400
    INVALID_STRUCTURE,  # valid JSON, but not an ExportTraceServiceRequest (e.g. attributes as an object) -> 400
    LOGS_NOT_TRACES,  # an OTLP logs export sent to the traces endpoint -> 400 (use /v1/logs)
    METRICS_NOT_TRACES,  # an OTLP metrics export sent to the traces endpoint -> 400 (use /v1/metrics)
)


class OtlpDecodeError(ValueError):
    """The request body cannot be decoded as an OTLP trace export. `message` says what to fix."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.message = message
        self.kind = kind

    def __repr__(self) -> str:
        return f"OtlpDecodeError({self.message!r}, kind={self.kind!r})"


LOGS_MESSAGE = (
    "This is an OTLP logs export (resourceLogs), sent to the traces endpoint. Send logs to /v1/logs, or point the "
    "trace exporter (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) at /v1/traces."
)
METRICS_MESSAGE = (
    "This is an OTLP metrics export (resourceMetrics), sent to the traces endpoint. Send metrics to /v1/metrics, "
    "or point the trace exporter (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) at /v1/traces."
)


def compression_hint(body: bytes) -> str:
    """A hint to append to a decode error when the body is still gzip-compressed."""
    if body[:2] == b"\x1f\x8b":
        return " The body is gzip-compressed: send it with 'Content-Encoding: gzip'."
    return ""
