"""Import trace files into a project (`manage.py import_traces`): the same write path as the receivers.

What is read, file by file (a folder is walked recursively, in name order; other files are listed as skipped):

* `*.json` — one request per file: an OTLP/JSON `ExportTraceServiceRequest` (`{"resourceSpans": [...]}`), or a
  Langfuse ingestion batch (`{"batch": [...]}`), a single Langfuse ingestion event (`{"id", "type", "timestamp",
  "body"}`) or a JSON array of such events. A `.json` file holding one compact request per line is read as JSONL.
* `*.jsonl` / `*.ndjson` — one such request per line (blank lines ignored).
* any of these gzip-compressed (`*.json.gz`, `*.jsonl.gz`, `*.ndjson.gz`).

Every request (file or line) is accepted or refused on its own, with a reason: undecodable JSON, not a trace
request (a logs or metrics export, a failure-labels line such as `labels.jsonl`, ...), no usable span (all spans
rejected for bad ids). Labels are never read into spans: a line without `resourceSpans` is not an OTLP request and
is refused. Spans go through `spans_ingest` (OTLP) or `langfuse_batch_ingest` (Langfuse), which are idempotent on
(project, trace id, span id), so importing the same files again stores nothing twice; the summary counts what was
already present. The touched traces are finalised before `traces_import` returns. Files and lines are read by import_files.py; the
summary is import_summary.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db.models import Q
from django.utils import timezone

from clear.errors import ClearError
from clear.projects.models import Project
from traces.models import Span, Trace
from traces.normalize import (
    LangfuseBatchError,
    OtlpDecodeError,
    SpanRejection,
    decode_export_request,
    normalize_ingestion_batch,
)
from traces.normalize.langfuse import EVENT_TYPES
from traces.normalize.otlp_errors import INVALID_JSON, LOGS_NOT_TRACES, METRICS_NOT_TRACES
from traces.normalize.values import loads
from traces.selectors.traces import trace_days_for
from traces.services.finalize import trace_finalize
from traces.services.import_files import RequestRefused, import_files_list, requests_read
from traces.services.import_summary import ImportNote, ImportSummary
from traces.services.ingest import langfuse_batch_ingest, spans_ingest

OUTCOMES = ("success", "failure")
OUTCOME_SOURCE = "import"
_LABEL_KEYS = {"mistake_agent", "mistake_step", "mistake_span_id", "mistake_reason"}
_MAX_SPAN_REASONS = 5

ProgressCallback = Callable[[int, int, str], None]  # (done units, total units, current file name)


def _request_kind(raw: bytes) -> tuple[str, Any]:
    """('otlp', None) | ('langfuse', payload); raises RequestRefused for what is certainly neither."""
    if b'"resourceSpans"' in raw or b'"resource_spans"' in raw:
        return "otlp", None
    try:
        doc = loads(raw)
    except UnicodeDecodeError:
        raise RequestRefused("not UTF-8 text (binary or compressed data?): expected OTLP/JSON") from None
    except ValueError as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise RequestRefused(f"not valid JSON{where}: {getattr(exc, 'msg', exc)}") from None
    if isinstance(doc, dict) and isinstance(doc.get("batch"), list):
        return "langfuse", doc
    if _is_langfuse_event(doc):
        return "langfuse", {"batch": [doc]}
    if isinstance(doc, list) and doc and all(_is_langfuse_event(item) for item in doc):
        return "langfuse", {"batch": doc}
    if isinstance(doc, dict) and _LABEL_KEYS & set(doc):
        keys = ", ".join(sorted(map(str, doc))[:6])
        raise RequestRefused(
            f"a failure-label record (keys: {keys}), not an OTLP request: labels are never imported as traces"
        )
    return "otlp", None  # the decoder explains what is wrong with it


def _is_langfuse_event(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("type") in EVENT_TYPES and isinstance(doc.get("body"), dict)


def _otlp_refusal(exc: OtlpDecodeError) -> str:
    if exc.kind == LOGS_NOT_TRACES:
        return "an OTLP logs export (resourceLogs), not traces: only trace exports (resourceSpans) are imported"
    if exc.kind == METRICS_NOT_TRACES:
        return "an OTLP metrics export (resourceMetrics), not traces: only trace exports (resourceSpans) are imported"
    if exc.kind == INVALID_JSON:
        return exc.message.replace("The body is", "not").replace("Send a complete", "expected a complete")
    return f"not an OTLP trace request: {exc.message}"


def _span_reasons(rejected: list[SpanRejection]) -> str:
    shown = "; ".join(r.message for r in rejected[:_MAX_SPAN_REASONS])
    more = f" (and {len(rejected) - _MAX_SPAN_REASONS} more)" if len(rejected) > _MAX_SPAN_REASONS else ""
    return f"{shown}{more}"


class _Importer:
    def __init__(self, *, project: Project, summary: ImportSummary) -> None:
        self.project = project
        self.summary = summary
        self.trace_ids: set[str] = set()

    def request(self, *, raw: bytes, file: str, line: int | None) -> None:
        try:
            kind, payload = _request_kind(raw)
            if kind == "langfuse":
                self._langfuse(payload=payload, file=file, line=line)
            else:
                self._otlp(raw=raw, file=file, line=line)
        except RequestRefused as refused:
            self.summary.requests_refused += 1
            self.summary.refused.append(ImportNote(file=file, line=line, reason=refused.reason))
            return
        self.summary.requests_accepted += 1

    def _otlp(self, *, raw: bytes, file: str, line: int | None) -> None:
        try:
            batch = decode_export_request(body=raw, content_type="application/json")
        except OtlpDecodeError as exc:
            raise RequestRefused(_otlp_refusal(exc)) from None
        if not batch.spans:
            if batch.rejected:
                raise RequestRefused(f"all {len(batch.rejected)} spans rejected: {_span_reasons(batch.rejected)}")
            raise RequestRefused("an OTLP request without any span")
        if batch.rejected:
            self.summary.spans_rejected += len(batch.rejected)
            self.summary.warnings.append(ImportNote(
                file=file, line=line,
                reason=f"{len(batch.rejected)} of {len(batch.rejected) + len(batch.spans)} spans rejected: "
                       f"{_span_reasons(batch.rejected)}",
            ))
        distinct = len({(s.trace_id, s.span_id) for s in batch.spans})
        result = spans_ingest(project=self.project, spans=batch.spans, rejected=batch.rejected)
        self.summary.spans_received += distinct
        self.summary.spans_created += result.spans_created
        self.summary.spans_already_present += distinct - result.spans_created
        self.trace_ids.update(result.trace_ids)

    def _langfuse(self, *, payload: dict, file: str, line: int | None) -> None:
        try:
            batch = normalize_ingestion_batch(payload=payload)
        except LangfuseBatchError as exc:
            raise RequestRefused(f"not a Langfuse ingestion batch: {exc}") from None
        if batch.errors:
            reasons = "; ".join(f"event {e.get('id') or '?'}: {e.get('message')}" for e in batch.errors[:5])
            if not batch.successes:
                raise RequestRefused(f"all {len(batch.errors)} Langfuse events refused: {reasons}")
            self.summary.langfuse_events_refused += len(batch.errors)
            self.summary.warnings.append(ImportNote(
                file=file, line=line, reason=f"{len(batch.errors)} Langfuse events refused: {reasons}"
            ))
        if not (batch.spans or batch.updates or batch.traces or batch.scores):
            raise RequestRefused("a Langfuse batch without traces, observations or scores")
        keys = {(s.trace_id, s.span_id) for s in batch.spans}
        present = span_keys_stored(project=self.project, keys=keys)
        langfuse_batch_ingest(project=self.project, batch=batch)
        self.summary.spans_received += len(keys)
        self.summary.spans_created += len(keys - present)
        self.summary.spans_already_present += len(keys & present)
        self.summary.scores += len(batch.scores)
        self.trace_ids.update(trace_id for trace_id, _ in keys)
        self.trace_ids.update(update.trace_id for update in batch.traces)
        self.trace_ids.update(score.trace_id for score in batch.scores)
        for update in batch.updates:
            if update.trace_id is not None:
                self.trace_ids.add(update.trace_id)
            else:
                span = Span.objects.filter(project=self.project, span_id=update.span_id).select_related("trace").first()
                if span is not None:
                    self.trace_ids.add(span.trace.trace_id)


def span_keys_stored(*, project: Project, keys: set[tuple[str, str]]) -> set[tuple[str, str]]:
    if not keys:
        return set()
    trace_ids = {trace_id for trace_id, _ in keys}
    # The stored traces' days first: the span read is then planned against those days' partitions only.
    days = trace_days_for(project=project, trace_pks=Trace.objects.filter(project=project, trace_id__in=trace_ids)
                          .values("pk"))
    if not days:  # none of these traces is stored yet
        return set()
    stored = Span.objects.filter(
        project=project,
        trace__trace_id__in=trace_ids,
        trace_day__in=days,
        span_id__in={span_id for _, span_id in keys},
    ).values_list("trace__trace_id", "span_id")
    return set(stored) & keys


def traces_import(
    *, project: Project, path: Path, outcome: str | None = None, progress: ProgressCallback | None = None
) -> ImportSummary:
    """Import every request under `path` into `project`, finalise the touched traces and, with `outcome`, set that
    outcome on the touched traces that carry none. Raises ImportPathError for a missing or empty path."""
    if outcome is not None and outcome not in OUTCOMES:
        raise ClearError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    path = Path(path)
    files, skipped = import_files_list(path=path)
    base = path if path.is_dir() else path.parent
    summary = ImportSummary(
        path=str(path),
        files=[str(f.relative_to(base)) for f in files],
        skipped_files=[str(f.relative_to(base)) for f in skipped],
        outcome=outcome,
    )
    importer = _Importer(project=project, summary=summary)
    started = timezone.now()
    total = sum(f.stat().st_size for f in files) or 1
    done = 0

    for file, name in zip(files, summary.files):
        file_start = done

        def advance(count: int, *, name: str = name) -> None:
            nonlocal done
            done += count
            if progress is not None:
                progress(min(done, total), total, name)

        for line, raw in requests_read(path=file, advance=advance):
            if isinstance(raw, RequestRefused):
                summary.requests_refused += 1
                summary.refused.append(ImportNote(file=name, line=line, reason=raw.reason))
                continue
            importer.request(raw=raw, file=name, line=line)
        # Compressed files advance by uncompressed bytes: settle on the file's size on disk.
        done = file_start + file.stat().st_size
        if progress is not None:
            progress(min(done, total), total, name)

    traces = Trace.objects.filter(project=project, trace_id__in=importer.trace_ids)
    pks = sorted(traces.values_list("pk", flat=True))
    for pk in pks:
        trace_finalize(trace_pk=pk)
    summary.traces_touched = len(pks)
    summary.traces_created = traces.filter(first_received_at__gte=started).count()
    if outcome is not None and pks:
        summary.outcome_set = Trace.objects.filter(pk__in=pks).filter(
            Q(outcome__isnull=True) | Q(outcome="")
        ).update(outcome=outcome, outcome_source=OUTCOME_SOURCE)
    return summary


__all__ = [
    "OUTCOMES",
    "span_keys_stored",
    "traces_import",
]
