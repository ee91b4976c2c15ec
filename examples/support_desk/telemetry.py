"""OpenTelemetry wiring: one TracerProvider per run, spans timed by the virtual clock.

Spans are opened with an explicit parent and explicit start/end timestamps instead of
the ambient context, because concurrently scheduled generators interleave and would
otherwise leave the wrong span "current".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .runtime import Scheduler

SERVICE_NAME = "support-desk"
INSTRUMENTATION_SCOPE = "examples.support_desk"
INSTRUMENTATION_VERSION = "0.1.0"
EXPORT_BATCH_SIZE = 512

AttributeValue = str | bool | int | float | Sequence[str]


def to_json(value: Any) -> str:
    """Stable JSON for attribute values, so equal payloads give byte-equal attributes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def otlp_http_exporter(endpoint: str, key: str | None, *, timeout_s: float = 10.0) -> SpanExporter:
    """OTLP/HTTP (protobuf) exporter posting to `<endpoint>/v1/traces` with a bearer key."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", headers=headers, timeout=timeout_s)


class BufferingSpanProcessor(SpanProcessor):
    """Collects finished spans and hands them to the exporter on `flush()`.

    Unlike the SDK's batch processor it starts no thread and never shuts the exporter
    down, so a caller can reuse one exporter (an in-memory one in tests) across runs.
    """

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter
        self._pending: list[ReadableSpan] = []
        self.exported_count = 0
        self.failed_count = 0

    def on_end(self, span: ReadableSpan) -> None:
        self._pending.append(span)

    def flush(self) -> bool:
        ok = True
        while self._pending:
            batch, self._pending = self._pending[:EXPORT_BATCH_SIZE], self._pending[EXPORT_BATCH_SIZE:]
            if self._exporter.export(batch) is SpanExportResult.SUCCESS:
                self.exported_count += len(batch)
            else:
                self.failed_count += len(batch)
                ok = False
        return ok

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.flush()

    def shutdown(self) -> None:
        self.flush()


class RunTelemetry:
    """A fresh provider for one run (a suite or a single task) and its buffered export."""

    def __init__(self, *, release: str, exporter: SpanExporter | None) -> None:
        resource = Resource.create({"service.name": SERVICE_NAME, "service.version": release})
        # Not shut down at interpreter exit: the run flushes explicitly, and tests create
        # many providers in one process.
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.processor: BufferingSpanProcessor | None = None
        if exporter is not None:
            self.processor = BufferingSpanProcessor(exporter)
            self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION)

    def flush(self) -> bool:
        return self.processor.flush() if self.processor else True

    @property
    def exported_count(self) -> int:
        return self.processor.exported_count if self.processor else 0

    @property
    def failed_count(self) -> int:
        return self.processor.failed_count if self.processor else 0


class Tracing:
    """Span helpers bound to one tracer and one virtual clock."""

    def __init__(self, tracer: trace.Tracer, clock: Scheduler) -> None:
        self._tracer = tracer
        self._clock = clock

    def start(
        self,
        name: str,
        *,
        parent: Span | None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> Span:
        context = trace.set_span_in_context(parent) if parent is not None else Context()
        return self._tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=dict(attributes or {}),
            start_time=self._clock.now_ns,
            record_exception=False,
            set_status_on_exception=False,
        )

    def end(self, span: Span) -> None:
        span.end(end_time=self._clock.now_ns)

    def record_error(self, span: Span, error: BaseException, *, error_type: str | None = None) -> None:
        """Mark a span failed the way instrumentations do: exception event plus ERROR status."""
        span.record_exception(error, timestamp=self._clock.now_ns)
        span.set_attribute("error.type", error_type or type(error).__qualname__)
        span.set_status(Status(StatusCode.ERROR, str(error)))
