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
already present. The touched traces are finalised before `traces_import` returns.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
    decode_export_request,
    normalize_ingestion_batch,
)
from traces.normalize.langfuse import EVENT_TYPES
from traces.normalize.otlp_errors import INVALID_JSON, LOGS_NOT_TRACES, METRICS_NOT_TRACES
from traces.normalize.values import loads
from traces.services.finalize import trace_finalize
from traces.services.ingest import langfuse_batch_ingest, spans_ingest

WHOLE_FILE_SUFFIXES = (".json",)
LINE_SUFFIXES = (".jsonl", ".ndjson")
IMPORTABLE_SUFFIXES = WHOLE_FILE_SUFFIXES + LINE_SUFFIXES
OUTCOMES = ("success", "failure")
OUTCOME_SOURCE = "import"
_LABEL_KEYS = {"mistake_agent", "mistake_step", "mistake_span_id", "mistake_reason"}
_MAX_SPAN_REASONS = 5

ProgressCallback = Callable[[int, int, str], None]  # (done units, total units, current file name)


class ImportPathError(ClearError):
    code = "import_path"


@dataclass
class ImportNote:
    """A refused request (file or line), or a partial problem inside an accepted one."""

    file: str
    line: int | None  # 1-based line of a JSONL file; None for a whole-file request
    reason: str


@dataclass
class ImportSummary:
    path: str = ""
    files: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    requests_accepted: int = 0
    requests_refused: int = 0
    spans_received: int = 0  # distinct spans in accepted requests
    spans_created: int = 0
    spans_already_present: int = 0
    spans_rejected: int = 0  # dropped for missing / invalid ids inside accepted requests
    langfuse_events_refused: int = 0
    scores: int = 0
    traces_touched: int = 0
    traces_created: int = 0
    outcome: str | None = None
    outcome_set: int = 0
    refused: list[ImportNote] = field(default_factory=list)
    warnings: list[ImportNote] = field(default_factory=list)

    @property
    def traces_already_present(self) -> int:
        return self.traces_touched - self.traces_created


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def import_files_list(*, path: Path) -> tuple[list[Path], list[Path]]:
    """(files to read, files skipped) under `path` (a file or a folder). Raises ImportPathError."""
    if not path.exists():
        raise ImportPathError(
            f"{path} does not exist: pass a file or a folder of OTLP/JSON requests (*.json) or JSONL files (*.jsonl)."
        )
    if path.is_file():
        return [path], []
    if not path.is_dir():
        raise ImportPathError(f"{path} is neither a file nor a folder.")
    files, skipped = [], []
    for candidate in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = candidate.relative_to(path)
        if any(part.startswith(".") for part in relative.parts):
            continue
        (files if _suffix(candidate) in IMPORTABLE_SUFFIXES else skipped).append(candidate)
    if not files:
        raise ImportPathError(
            f"{path} holds no *.json, *.jsonl or *.ndjson file (optionally .gz): nothing to import."
        )
    return files, skipped


def _suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _open(path: Path):
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def _requests_read(*, path: Path, advance: Callable[[int], None]) -> Iterator[tuple[int | None, bytes | _Refused]]:
    """(line number or None, raw request bytes) for every request in the file; a read failure yields _Refused."""
    try:
        with _open(path) as handle:
            if _suffix(path) in LINE_SUFFIXES:
                yield from _lines(handle, advance)
                return
            data = handle.read()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        yield None, _Refused(f"cannot be read: {exc}")
        return
    advance(len(data))
    lines = [line for line in data.splitlines() if line.strip()]
    first = lines[0].strip() if lines else b""
    if len(lines) > 1 and first[:1] == b"{" and first[-1:] == b"}":
        # One compact request per line in a .json file: read it as JSONL.
        number = 0
        for number, line in enumerate(data.splitlines(), start=1):
            if line.strip():
                yield number, line
        return
    yield None, data


def _lines(handle, advance: Callable[[int], None]) -> Iterator[tuple[int, bytes]]:
    number = 0
    while True:
        try:
            line = handle.readline()
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            yield number + 1, _Refused(f"cannot be read: {exc}")
            return
        if not line:
            return
        number += 1
        advance(len(line))
        if line.strip():
            yield number, line


def _request_kind(raw: bytes) -> tuple[str, Any]:
    """('otlp', None) | ('langfuse', payload); raises _Refused for what is certainly neither."""
    if b'"resourceSpans"' in raw or b'"resource_spans"' in raw:
        return "otlp", None
    try:
        doc = loads(raw)
    except UnicodeDecodeError:
        raise _Refused("not UTF-8 text (binary or compressed data?): expected OTLP/JSON") from None
    except ValueError as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise _Refused(f"not valid JSON{where}: {getattr(exc, 'msg', exc)}") from None
    if isinstance(doc, dict) and isinstance(doc.get("batch"), list):
        return "langfuse", doc
    if _is_langfuse_event(doc):
        return "langfuse", {"batch": [doc]}
    if isinstance(doc, list) and doc and all(_is_langfuse_event(item) for item in doc):
        return "langfuse", {"batch": doc}
    if isinstance(doc, dict) and _LABEL_KEYS & set(doc):
        keys = ", ".join(sorted(map(str, doc))[:6])
        raise _Refused(
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


def _span_reasons(rejected: list[tuple[int, str]]) -> str:
    shown = "; ".join(reason for _, reason in rejected[:_MAX_SPAN_REASONS])
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
        except _Refused as refused:
            self.summary.requests_refused += 1
            self.summary.refused.append(ImportNote(file=file, line=line, reason=refused.reason))
            return
        self.summary.requests_accepted += 1

    def _otlp(self, *, raw: bytes, file: str, line: int | None) -> None:
        try:
            batch = decode_export_request(body=raw, content_type="application/json")
        except OtlpDecodeError as exc:
            raise _Refused(_otlp_refusal(exc)) from None
        if not batch.spans:
            if batch.rejected:
                raise _Refused(f"all {len(batch.rejected)} spans rejected: {_span_reasons(batch.rejected)}")
            raise _Refused("an OTLP request without any span")
        if batch.rejected:
            self.summary.spans_rejected += len(batch.rejected)
            self.summary.warnings.append(ImportNote(
                file=file, line=line,
                reason=f"{len(batch.rejected)} of {len(batch.rejected) + len(batch.spans)} spans rejected: "
                       f"{_span_reasons(batch.rejected)}",
            ))
        distinct = len({(s.trace_id, s.span_id) for s in batch.spans})
        result = spans_ingest(project=self.project, spans=batch.spans)
        self.summary.spans_received += distinct
        self.summary.spans_created += result.spans_created
        self.summary.spans_already_present += distinct - result.spans_created
        self.trace_ids.update(result.trace_ids)

    def _langfuse(self, *, payload: dict, file: str, line: int | None) -> None:
        try:
            batch = normalize_ingestion_batch(payload=payload)
        except LangfuseBatchError as exc:
            raise _Refused(f"not a Langfuse ingestion batch: {exc}") from None
        if batch.errors:
            reasons = "; ".join(f"event {e.get('id') or '?'}: {e.get('message')}" for e in batch.errors[:5])
            if not batch.successes:
                raise _Refused(f"all {len(batch.errors)} Langfuse events refused: {reasons}")
            self.summary.langfuse_events_refused += len(batch.errors)
            self.summary.warnings.append(ImportNote(
                file=file, line=line, reason=f"{len(batch.errors)} Langfuse events refused: {reasons}"
            ))
        if not (batch.spans or batch.updates or batch.traces or batch.scores):
            raise _Refused("a Langfuse batch without traces, observations or scores")
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
    stored = Span.objects.filter(
        project=project,
        trace__trace_id__in={trace_id for trace_id, _ in keys},
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

        for line, raw in _requests_read(path=file, advance=advance):
            if isinstance(raw, _Refused):
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


def notes_grouped(notes: list[ImportNote]) -> list[tuple[str, str]]:
    """[(where, reason)] with the lines of one file that share a reason collapsed into ranges ("labels.jsonl:1-126")."""
    grouped: dict[tuple[str, str], list[int | None]] = {}
    for note in notes:
        grouped.setdefault((note.file, note.reason), []).append(note.line)
    out = []
    for (file, reason), lines in grouped.items():
        numbers = sorted(n for n in lines if n is not None)
        where = file
        if numbers:
            count = f" ({len(numbers)} lines)" if len(numbers) > 1 else ""
            where = f"{file}:{_ranges(numbers)}{count}"
        out.append((where, reason))
    return out


def _ranges(numbers: list[int]) -> str:
    parts, start, previous = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == previous + 1:
            previous = n
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if n is not None:
            start = previous = n
    if len(parts) > 8:
        parts = parts[:8] + ["..."]
    return ",".join(parts)


def summary_as_dict(summary: ImportSummary) -> dict:
    return {
        "path": summary.path,
        "files": len(summary.files),
        "skipped_files": summary.skipped_files,
        "requests_accepted": summary.requests_accepted,
        "requests_refused": summary.requests_refused,
        "traces": summary.traces_touched,
        "traces_created": summary.traces_created,
        "traces_already_present": summary.traces_already_present,
        "spans": summary.spans_received,
        "spans_created": summary.spans_created,
        "spans_already_present": summary.spans_already_present,
        "spans_rejected": summary.spans_rejected,
        "langfuse_events_refused": summary.langfuse_events_refused,
        "scores": summary.scores,
        "outcome": summary.outcome,
        "outcome_set": summary.outcome_set,
        "refused": [{"where": w, "reason": r} for w, r in notes_grouped(summary.refused)],
        "warnings": [{"where": w, "reason": r} for w, r in notes_grouped(summary.warnings)],
    }


__all__ = [
    "IMPORTABLE_SUFFIXES",
    "ImportNote",
    "ImportPathError",
    "ImportSummary",
    "import_files_list",
    "notes_grouped",
    "span_keys_stored",
    "summary_as_dict",
    "traces_import",
]
