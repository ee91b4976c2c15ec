"""The write path: normalised spans into Postgres, idempotent on (project, trace id, span id).

One transaction per request: trace rows, span rows and the outbox items for follow-up work commit together, so
the client's 200 means the spans are durable and their processing is scheduled.
"""

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields as dataclass_fields

from django.db import transaction
from django.utils import timezone

from clear.outbox.services import outbox_publish_keys
from clear.projects.models import Project
from traces.facts import TRACE_FINALIZE
from traces.models import Span, Trace
from traces.normalize import LangfuseBatch, ScoreRecord, SpanRecord, SpanUpdate, TraceUpdate, resolve_nodes
from traces.services.bulk import COLUMN_NAMES, SpanRow, spans_insert
from traces.services.trace_rows import stored_spans_find, traces_context_save, traces_upsert

_SPAN_COLUMNS = (
    "parent_span_id", "name", "kind", "node", "node_fallback", "agent_name", "tool_name", "model", "input", "output",
    "status", "status_message", "start_time", "end_time", "input_tokens", "output_tokens", "cached_tokens",
    "usage_is_aggregate", "cost", "release", "environment", "session_id", "user_id", "tags", "metadata",
    "attributes", "resource", "scope", "events", "exceptions",
)
_TEXT_COLUMNS = {
    "parent_span_id", "node", "node_fallback", "agent_name", "tool_name", "model", "status_message", "release",
    "environment", "session_id", "user_id", "scope",
}
_MERGED_DICTS = {"metadata", "attributes"}
# Trace fields a root span (or a Langfuse trace-create) sets on the trace summary.
_TRACE_CONTEXT = ("release", "environment", "session_id", "user_id")


@dataclass
class IngestResult:
    spans_received: int = 0
    spans_created: int = 0
    trace_ids: list[str] = field(default_factory=list)


# SpanRow.from_columns() straight from a record: one attrgetter call reads every column the record has (the other
# positions read a placeholder attribute and are overwritten).
_FROM_RECORD = {"span_id", *_SPAN_COLUMNS}
_record_columns = operator.attrgetter(*(n if n in _FROM_RECORD else "span_id" for n in COLUMN_NAMES))
_COL = {name: i for i, name in enumerate(COLUMN_NAMES)}
_TEXT_POSITIONS = tuple(_COL[n] for n in sorted(_TEXT_COLUMNS))
_NAME, _PROJECT, _TRACE, _INFERRED, _RECEIVED = (_COL[n] for n in ("name", "project", "trace", "node_inferred",
                                                                     "received_at"))


def _span_row(record: SpanRecord, *, project_pk: int, trace_pk: int, node_inferred: bool) -> SpanRow:
    """The row of a record: its _SPAN_COLUMNS (None as "" in text columns, the name cut to 500) and span_id."""
    values = list(_record_columns(record))
    for i in _TEXT_POSITIONS:
        if values[i] is None:
            values[i] = ""
    name = values[_NAME]
    values[_NAME] = name[:500] if name else ""
    values[_PROJECT], values[_TRACE], values[_INFERRED], values[_RECEIVED] = project_pk, trace_pk, node_inferred, None
    return SpanRow.from_columns(values)


def _trace_rows(*, project: Project, trace_ids: Iterable[str]) -> dict[str, Trace]:
    """Get or create the trace rows, locked until the transaction ends (see trace_rows.traces_upsert)."""
    return traces_upsert(project=project, trace_ids=trace_ids)[0]


def _apply_root_context(*, trace: Trace, record: SpanRecord) -> list[str]:
    """Copy what a root span says about the whole trace onto the trace row; returns the changed field names."""
    changed = []
    updates = {
        "name": (record.name or "")[:500],
        "root_span_id": record.span_id,
        "task_id": record.task_id or "",
        "tags": record.tags or [],
        **{name: getattr(record, name) or "" for name in _TRACE_CONTEXT},
    }
    for name, value in updates.items():
        if value and getattr(trace, name) != value:
            setattr(trace, name, value)
            changed.append(name)
    if record.outcome and trace.outcome_source != "api":
        trace.outcome, trace.outcome_source = record.outcome, "root_span"
        changed += ["outcome", "outcome_source"]
    if record.score is not None and trace.outcome_source != "api":
        trace.score = record.score
        changed.append("score")
    return changed


def _stored_lookup(
    *, traces: dict[str, Trace], new: set[str], spans: list[SpanRecord]
) -> tuple[set[tuple[str, str]], dict[str, tuple[str | None, str | None]]]:
    """(keys of the batch's spans already stored, (kind, node) of stored parents outside the batch), in one query.

    Traces whose row this request created have nothing stored: their spans are not looked up. A stored parent's
    inferred node says nothing about its agent, so only an AGENT parent's inferred node is passed on."""
    in_batch = {(s.trace_id, s.span_id) for s in spans}
    own: set[tuple[int, str]] = set()
    parents: set[tuple[int, str]] = set()
    for span in spans:
        if span.trace_id in new:
            continue
        trace_pk = traces[span.trace_id].pk
        own.add((trace_pk, span.span_id))
        if span.node is None and span.parent_span_id and (span.trace_id, span.parent_span_id) not in in_batch:
            parents.add((trace_pk, span.parent_span_id))
    if not own and not parents:
        return set(), {}
    stored = stored_spans_find(keys=own | parents)
    by_pk = {trace.pk: trace_id for trace_id, trace in traces.items()}
    existing = {(by_pk[trace_pk], span_id) for trace_pk, span_id in stored.keys() & own}
    known = {}
    for key in stored.keys() & parents:
        kind, node, inferred = stored[key]
        known[key[1]] = (kind, None if inferred and kind != Span.Kind.AGENT else node)
    return existing, known


def _resolve_nodes(*, spans: list[SpanRecord], known: dict) -> set[tuple[str, str]]:
    """Fill every span's node; returns the keys of spans whose node is only a fallback for now."""
    undecided = {(s.trace_id, s.span_id) for s in spans if s.node is None}
    resolve_nodes(spans, known_nodes=known)
    return {
        (s.trace_id, s.span_id)
        for s in spans
        if (s.trace_id, s.span_id) in undecided and s.node == (s.node_fallback or s.name)
    }


def spans_ingest(*, project: Project, spans: list[SpanRecord], provided_fields: dict | None = None) -> IngestResult:
    """Store spans; a span already stored is left as it is, except for the fields listed in `provided_fields`
    (Langfuse creates are upserts that carry only some fields)."""
    result = IngestResult(spans_received=len(spans))
    if not spans:
        return result
    with transaction.atomic():
        traces, new = traces_upsert(project=project, trace_ids=(s.trace_id for s in spans))
        existing, known = _stored_lookup(traces=traces, new=new, spans=spans)
        inferred = _resolve_nodes(spans=spans, known=known)
        rows, seen = [], set()
        for record in spans:
            key = (record.trace_id, record.span_id)
            if key in seen:
                continue  # the same span twice in one request: the first copy wins, as with a retried batch
            seen.add(key)
            if key in existing:
                if provided_fields and key in provided_fields:
                    _span_merge(trace=traces[record.trace_id], span_id=record.span_id,
                                fields={f: getattr(record, f) for f in provided_fields[key] if f in _SPAN_COLUMNS})
                continue
            rows.append(_span_row(record, project_pk=project.pk, trace_pk=traces[record.trace_id].pk,
                                  node_inferred=key in inferred))
        created = spans_insert(rows)  # COPY on Postgres, bulk_create(ignore_conflicts=True) elsewhere
        result.spans_created = len(created)
        contexts = []
        for record in spans:
            if record.is_root:
                trace = traces[record.trace_id]
                contexts.append((trace, _apply_root_context(trace=trace, record=record)))
        traces_context_save(traces=contexts)
        outbox_publish_keys(topic=TRACE_FINALIZE, keys=[str(traces[t].pk) for t in sorted(traces)])
        result.trace_ids = sorted(traces)
    return result


def _span_merge(*, trace: Trace, span_id: str, fields: dict) -> bool:
    span = Span.objects.select_for_update().filter(trace=trace, span_id=span_id).first()
    if span is None:
        return False
    changed = []
    for name, value in fields.items():
        if name not in _SPAN_COLUMNS:
            continue
        if name in _MERGED_DICTS and isinstance(value, dict):
            value = {**(getattr(span, name) or {}), **value}
        if value is None and name in _TEXT_COLUMNS:
            value = ""
        setattr(span, name, value)
        changed.append(name)
    if changed:
        span.save(update_fields=changed)
    return True


def _record_from_fields(*, trace_id: str, span_id: str, fields: dict) -> SpanRecord:
    known = {f.name for f in dataclass_fields(SpanRecord)}
    values = {k: v for k, v in fields.items() if k in known and k not in {"trace_id", "span_id"}}
    values.setdefault("name", "")
    values.setdefault("start_time", timezone.now())
    return SpanRecord(trace_id=trace_id, span_id=span_id, **values)


def langfuse_batch_ingest(*, project: Project, batch: LangfuseBatch) -> None:
    """Store a normalised Langfuse batch: creates (upserts), updates, trace attributes and scores."""
    with transaction.atomic():
        spans_ingest(project=project, spans=batch.spans, provided_fields=batch.provided_fields)
        for update in batch.traces:
            _trace_update_apply(project=project, update=update)
        for update in batch.updates:
            _span_update_apply(project=project, update=update)
        if batch.scores:
            scores_ingest(project=project, scores=batch.scores)


def _trace_update_apply(*, project: Project, update: TraceUpdate) -> None:
    trace = _trace_rows(project=project, trace_ids=[update.trace_id])[update.trace_id]
    if not _span_merge(trace=trace, span_id=update.root_span_id, fields=update.fields):
        spans_ingest(project=project, spans=[
            _record_from_fields(trace_id=update.trace_id, span_id=update.root_span_id, fields=update.fields)
        ])
    root = _record_from_fields(trace_id=update.trace_id, span_id=update.root_span_id, fields=update.fields)
    changed = _apply_root_context(trace=trace, record=root)
    if changed:
        trace.save(update_fields=sorted(set(changed)))


def _span_update_apply(*, project: Project, update: SpanUpdate) -> None:
    if update.trace_id is None:
        span = Span.objects.filter(project=project, span_id=update.span_id).select_related("trace").first()
        if span is None:
            return  # an update for a span we never saw and whose trace is unknown: nothing to attach it to
        trace = span.trace
    else:
        trace = _trace_rows(project=project, trace_ids=[update.trace_id])[update.trace_id]
    if not _span_merge(trace=trace, span_id=update.span_id, fields=update.fields):
        # Updates can overtake their create (SDKs flush in parallel); store what we have, the create merges later.
        spans_ingest(project=project, spans=[
            _record_from_fields(trace_id=trace.trace_id, span_id=update.span_id, fields=update.fields)
        ])
    outbox_publish_keys(topic=TRACE_FINALIZE, keys=[str(trace.pk)])


def scores_ingest(*, project: Project, scores: list[ScoreRecord]) -> None:
    from traces.models import Score

    traces = _trace_rows(project=project, trace_ids=[s.trace_id for s in scores])
    for record in scores:
        defaults = {
            "trace": traces[record.trace_id],
            "span_id": record.observation_id or "",
            "name": record.name[:200],
            "value": record.value,
            "string_value": record.string_value or "",
            "comment": record.comment or "",
            "source": (record.source or "")[:40],
        }
        if record.id:
            Score.objects.update_or_create(project=project, external_id=record.id[:200], defaults=defaults)
        else:
            Score.objects.create(project=project, **defaults)
    outbox_publish_keys(topic=TRACE_FINALIZE, keys=[str(traces[t].pk) for t in sorted(traces)])
