"""The write path: normalised spans into Postgres, idempotent on (project, trace id, span id).

One transaction per request: trace rows, span rows and the outbox items for follow-up work commit together, so
the client's 200 means the spans are durable and their processing is scheduled.
"""

import logging
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields as dataclass_fields

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from clear.outbox.services import outbox_publish_keys
from clear.projects.models import Project
from traces.facts import TRACE_FINALIZE
from traces.models import Span, Trace
from traces.normalize import LangfuseBatch, ScoreRecord, SpanRecord, SpanUpdate, TraceUpdate, resolve_nodes
from traces.normalize.nodes import fallback_node
from traces.normalize.records import SpanRejection
from traces.normalize.repair import repair_fields, repair_record
from traces.pricing import span_cost_estimate
from traces.services.bulk import COLUMN_NAMES, SpanRow, spans_insert
from traces.services.ingest_issues import ingest_issues_count, repair_reasons, trace_rejections_count
from traces.services.lifecycle import traces_content_changed
from traces.services.trace_rows import stored_spans_find, traces_context_save, traces_upsert

_SPAN_COLUMNS = (
    "parent_span_id", "name", "kind", "node", "node_fallback", "agent_name", "tool_name", "model", "input", "output",
    "status", "status_message", "start_time", "end_time", "input_tokens", "output_tokens", "cached_tokens",
    "reasoning_tokens", "usage_is_aggregate", "cost", "release", "environment", "session_id", "user_id", "tags",
    "metadata", "attributes", "resource", "scope", "events", "exceptions",
)
_TEXT_COLUMNS = {
    "parent_span_id", "node", "node_fallback", "agent_name", "tool_name", "model", "status_message", "release",
    "environment", "session_id", "user_id", "scope",
}
_MERGED_DICTS = {"metadata", "attributes"}
# Trace fields a root span (or a Langfuse trace-create) sets on the trace summary.
_TRACE_CONTEXT = ("release", "environment", "session_id", "user_id")


logger = logging.getLogger(__name__)


@dataclass
class IngestResult:
    spans_received: int = 0
    spans_created: int = 0
    trace_ids: list[str] = field(default_factory=list)
    # (record, its repairs) for every stored span that had to be repaired, in request order
    repaired: list[tuple[SpanRecord, list[dict]]] = field(default_factory=list)
    duplicates: int = 0  # copies of a span earlier in the same request, replaced by the later copy
    resends_updated: int = 0  # spans already stored that a resend changed

    def summary(self) -> str:
        """The repairs and duplicates in words, for a response message and the log ("" when there are none)."""
        parts = []
        if self.repaired:
            record, repairs = self.repaired[0]
            first = ", ".join(f"{r['field']} {r['reason'].replace('_', ' ')}" for r in repairs[:5])
            parts.append(f"{len(self.repaired)} span(s) stored with repairs (recorded in metadata['clear.repairs']); "
                         f"first: span {record.span_id} ({record.name[:80]!r}): {first}")
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicate span(s) in the request: the last copy of each was kept")
        if self.resends_updated:
            parts.append(f"{self.resends_updated} span(s) already stored were updated by this resend "
                         "(non-empty fields win)")
        return "; ".join(parts)


# SpanRow.from_columns() straight from a record: one attrgetter call reads every column the record has (the other
# positions read a placeholder attribute and are overwritten).
_FROM_RECORD = {"span_id", *_SPAN_COLUMNS}
_record_columns = operator.attrgetter(*(n if n in _FROM_RECORD else "span_id" for n in COLUMN_NAMES))
_COL = {name: i for i, name in enumerate(COLUMN_NAMES)}
_TEXT_POSITIONS = tuple(_COL[n] for n in sorted(_TEXT_COLUMNS))
_NAME, _PROJECT, _TRACE, _INFERRED, _RECEIVED, _DAY = (_COL[n] for n in ("name", "project", "trace", "node_inferred",
                                                                           "received_at", "trace_day"))


def _span_row(record: SpanRecord, *, project_pk: int, trace: Trace, node_inferred: bool) -> SpanRow:
    """The row of a record: its _SPAN_COLUMNS (None as "" in text columns, the name cut to 500) and span_id."""
    values = list(_record_columns(record))
    for i in _TEXT_POSITIONS:
        if values[i] is None:
            values[i] = ""
    name = values[_NAME]
    values[_NAME] = name[:500] if name else ""
    values[_PROJECT], values[_TRACE], values[_INFERRED], values[_RECEIVED] = project_pk, trace.pk, node_inferred, None
    values[_DAY] = trace.first_received_day
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
    stored = stored_spans_find(keys=own | parents, days={traces[s.trace_id].first_received_day for s in spans})
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
        if (s.trace_id, s.span_id) in undecided and s.node == fallback_node(s)
    }


def _last_copy_wins(spans: list[SpanRecord]) -> tuple[list[SpanRecord], int]:
    """One record per (trace, span), the last one sent (Langfuse's rule), in the order of first appearance."""
    last: dict[tuple[str, str], SpanRecord] = {}
    for record in spans:
        last[(record.trace_id, record.span_id)] = record
    if len(last) == len(spans):
        return spans, 0
    return list(last.values()), len(spans) - len(last)


def _is_empty(value: object) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _resends_merge(*, traces: dict[str, Trace], records: list[SpanRecord], inferred: set) -> dict[int, int]:
    """Spans sent again: their non-empty fields win over the stored ones (dicts merged), as Langfuse merges.
    One query for all of them (a retried batch is the common case, and it changes nothing); returns how many
    stored spans changed, per trace row."""
    stored = {(span.trace_id, span.span_id): span for span in Span.objects.select_for_update().filter(
        trace_id__in={traces[r.trace_id].pk for r in records}, span_id__in={r.span_id for r in records},
        trace_day__in={traces[r.trace_id].first_received_day for r in records})}
    updated: dict[int, int] = {}
    for record in records:
        span = stored.get((traces[record.trace_id].pk, record.span_id))
        if span is None:
            continue
        keep_node = (record.trace_id, record.span_id) in inferred
        changed = []
        for name in _SPAN_COLUMNS:
            if keep_node and name == "node":
                continue  # only a fallback: the stored node may already be the agent's
            value = getattr(record, name)
            if _is_empty(value):
                continue
            if name in _MERGED_DICTS and isinstance(value, dict):
                value = {**(getattr(span, name) or {}), **value}
            if getattr(span, name) != value:
                setattr(span, name, value)
                changed.append(name)
        if changed:
            span.save(update_fields=changed)
            updated[span.trace_id] = updated.get(span.trace_id, 0) + 1
    return updated


def spans_ingest(*, project: Project, spans: list[SpanRecord], provided_fields: dict | None = None,
                 rejected: Sequence[SpanRejection] = ()) -> IngestResult:
    """Store spans, each repaired on its own first (repair.py); of two copies in one request the last wins.

    A span already stored takes the resend's non-empty fields (as Langfuse merges), or with `provided_fields` only
    the fields listed there (Langfuse creates are upserts that carry only some fields). `rejected`, the request's
    spans the decoder refused, are counted on their traces once this request's rows exist."""
    result = IngestResult(spans_received=len(spans))
    if not spans:
        if rejected:
            trace_rejections_count(project=project, rejections=rejected)
        return result
    spans, result.duplicates = _last_copy_wins(spans)
    clean: set[int] = set()
    for record in spans:
        # Before anything is stored or derived from the record: one bad value must not fail the batch.
        repairs = repair_record(record, clean=clean)
        if repairs:
            result.repaired.append((record, repairs))
    with transaction.atomic():
        traces, new = traces_upsert(project=project, trace_ids=(s.trace_id for s in spans))
        existing, known = _stored_lookup(traces=traces, new=new, spans=spans)
        inferred = _resolve_nodes(spans=spans, known=known)
        rows, resent = [], []
        changed_traces: set[int] = set()  # judged traces this request adds spans to or changes spans of
        for record in spans:
            key = (record.trace_id, record.span_id)
            if key in existing:
                if provided_fields is None:
                    resent.append(record)
                elif key in provided_fields:
                    _span_merge(trace=traces[record.trace_id], span_id=record.span_id,
                                fields={f: getattr(record, f) for f in provided_fields[key] if f in _SPAN_COLUMNS})
                continue
            if record.cost is None and record.model:
                _cost_estimate(record)
            if traces[record.trace_id].judged_at is not None:
                changed_traces.add(traces[record.trace_id].pk)
            rows.append(_span_row(record, project_pk=project.pk, trace=traces[record.trace_id],
                                  node_inferred=key in inferred))
        if resent:
            updated = _resends_merge(traces=traces, records=resent, inferred=inferred)
            result.resends_updated = sum(updated.values())
            changed_traces.update(trace.pk for trace in traces.values() if trace.judged_at and trace.pk in updated)
        created = spans_insert(rows)  # COPY on Postgres, bulk_create(ignore_conflicts=True) elsewhere
        result.spans_created = len(created)
        if changed_traces:
            traces_content_changed(trace_pks=changed_traces, at=timezone.now())
        if result.repaired:
            _repaired_spans_count(traces=traces, existing=existing, repaired=result.repaired)
            ingest_issues_count(project=project, repaired=repair_reasons(result.repaired))
        if rejected:
            trace_rejections_count(project=project, rejections=rejected)
        contexts = []
        for record in spans:
            if record.is_root:
                trace = traces[record.trace_id]
                contexts.append((trace, _apply_root_context(trace=trace, record=record)))
        traces_context_save(traces=contexts)
        outbox_publish_keys(topic=TRACE_FINALIZE, keys=[str(traces[t].pk) for t in sorted(traces)])
        result.trace_ids = sorted(traces)
    if result.repaired or result.duplicates or result.resends_updated:
        logger.info("spans_ingest: project %s: %s", project.pk, result.summary())
    return result


def _repaired_spans_count(*, traces: dict[str, Trace], existing: set, repaired: list) -> None:
    """Add the newly stored repaired spans to their traces' repaired_spans (a resend was counted the first time);
    one UPDATE per distinct count, so a batch of one trace costs one query."""
    per_trace: dict[int, int] = {}
    for record, _repairs in repaired:
        if (record.trace_id, record.span_id) not in existing:
            pk = traces[record.trace_id].pk
            per_trace[pk] = per_trace.get(pk, 0) + 1
    by_count: dict[int, list[int]] = {}
    for pk, count in per_trace.items():
        by_count.setdefault(count, []).append(pk)
    for count, pks in by_count.items():
        Trace.objects.filter(pk__in=pks).update(repaired_spans=F("repaired_spans") + count)


def _cost_estimate(record: SpanRecord) -> None:
    """A span that reports tokens but no cost is priced from the model's list price; metadata says so, because the
    reported figure (discounts, batch pricing) is the better one when a tool sends it."""
    cost = span_cost_estimate(model=record.model, input_tokens=record.input_tokens,
                              output_tokens=record.output_tokens, cached_tokens=record.cached_tokens)
    if cost is not None:
        record.cost = cost
        record.metadata = {**(record.metadata or {}), "cost_estimated": True}


def _span_merge(*, trace: Trace, span_id: str, fields: dict) -> tuple[bool, bool]:
    """Write `fields` over the stored span; returns (the span was found, its content changed). A judged trace
    whose content changed is marked "changed since judged"."""
    span = Span.objects.select_for_update().filter(trace=trace, span_id=span_id,
                                                   trace_day=trace.first_received_day).first()
    if span is None:
        return False, False
    changed = []
    for name, value in fields.items():
        if name not in _SPAN_COLUMNS:
            continue
        if name in _MERGED_DICTS and isinstance(value, dict):
            value = {**(getattr(span, name) or {}), **value}
        if value is None and name in _TEXT_COLUMNS:
            value = ""
        if getattr(span, name) != value:
            setattr(span, name, value)
            changed.append(name)
    if changed:
        span.save(update_fields=changed)
        if trace.judged_at is not None:
            traces_content_changed(trace_pks={trace.pk}, at=timezone.now())
    return True, bool(changed)


def _record_from_fields(*, trace_id: str, span_id: str, fields: dict) -> SpanRecord:
    known = {f.name for f in dataclass_fields(SpanRecord)}
    values = {k: v for k, v in fields.items() if k in known and k not in {"trace_id", "span_id"}}
    values.setdefault("name", "")
    values.setdefault("start_time", timezone.now())
    return SpanRecord(trace_id=trace_id, span_id=span_id, **values)


def langfuse_batch_ingest(*, project: Project, batch: LangfuseBatch) -> IngestResult:
    """Store a normalised Langfuse batch: creates (upserts), updates, trace attributes and scores."""
    with transaction.atomic():
        result = spans_ingest(project=project, spans=batch.spans, provided_fields=batch.provided_fields)
        for update in batch.traces:
            _trace_update_apply(project=project, update=update)
        for update in batch.updates:
            _span_update_apply(project=project, update=update)
        if batch.scores:
            scores_ingest(project=project, scores=batch.scores)
        if batch.rejected:  # last: a trace-create or update of this batch may have made the trace row
            trace_rejections_count(project=project, rejections=batch.rejected)
    return result


def _trace_update_apply(*, project: Project, update: TraceUpdate) -> None:
    repair_fields(update.fields)
    trace = _trace_rows(project=project, trace_ids=[update.trace_id])[update.trace_id]
    if not _span_merge(trace=trace, span_id=update.root_span_id, fields=update.fields)[0]:
        spans_ingest(project=project, spans=[
            _record_from_fields(trace_id=update.trace_id, span_id=update.root_span_id, fields=update.fields)
        ])
    root = _record_from_fields(trace_id=update.trace_id, span_id=update.root_span_id, fields=update.fields)
    changed = _apply_root_context(trace=trace, record=root)
    if changed:
        trace.save(update_fields=sorted(set(changed)))


def _span_update_apply(*, project: Project, update: SpanUpdate) -> None:
    repair_fields(update.fields)
    if update.trace_id is None:
        span = Span.objects.filter(project=project, span_id=update.span_id).select_related("trace").first()
        if span is None:
            return  # an update for a span we never saw and whose trace is unknown: nothing to attach it to
        trace = span.trace
    else:
        trace = _trace_rows(project=project, trace_ids=[update.trace_id])[update.trace_id]
    if not _span_merge(trace=trace, span_id=update.span_id, fields=update.fields)[0]:
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
