"""The per-batch statements of the write path around the span COPY: trace rows, stored spans, root contexts.

    traces, new = traces_upsert(project=project, trace_ids=ids)   # get or create, locked until commit
    stored = stored_spans_find(keys=[(trace_pk, span_id), ...])   # {(trace_pk, span_id): (kind, node, inferred)}
    traces_context_save(traces=[(trace, changed_fields), ...])    # what root spans said about their traces

On Postgres each is one statement with server-side parameters (arrays, psycopg's own cursor): no ORM query
compilation and no client-side quoting of hundreds of parameters, which cost ~20% of a 500-span request through
the ORM. `traces_upsert` is one `INSERT ... ON CONFLICT DO UPDATE ... RETURNING`; it also says which trace rows it
created (`xmax = 0` on the returned row): no span of such a trace can be stored yet (spans reference their trace
row), so the caller skips the existing-span and stored-parent lookups for them. Elsewhere (SQLite) the ORM does
the same work and reports no trace as new, so every lookup is made.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, date

from django.db import connections, models, router
from django.db.models import Q
from django.utils import timezone

from clear.db import insert_select_parts, on_postgres, raw_cursor
from clear.projects.models import Project
from traces.models import Span, Trace

_TRACE_FIELDS = [f for f in Trace._meta.concrete_fields]
_JSON_FIELDS = {f.attname for f in _TRACE_FIELDS if isinstance(f, models.JSONField)}
# Root-span context written by traces_context_save, with the SQL array type of each column.
_CONTEXT_TYPES = {
    "name": "text", "root_span_id": "text", "task_id": "text", "tags": "jsonb", "release": "text",
    "environment": "text", "session_id": "text", "user_id": "text", "outcome": "text", "outcome_source": "text",
    "score": "float8",
}


def traces_upsert(*, project: Project, trace_ids: Iterable[str]) -> tuple[dict[str, Trace], set[str]]:
    """Get or create the trace rows and stamp `last_received_at`; returns the rows and the ids of those created.

    Rows are written in sorted order, so concurrent batches lock them in the same order; the locks are held until
    the caller's transaction ends, so two requests holding spans of one trace run one after the other."""
    wanted = sorted(set(trace_ids))
    now = timezone.now()
    if not wanted:
        return {}, set()
    alias = router.db_for_write(Trace)
    connection = connections[alias]
    if not on_postgres(connection):
        Trace.objects.bulk_create(
            [Trace(project=project, trace_id=t, first_received_at=now, first_received_day=now.astimezone(UTC).date(),
                   last_received_at=now) for t in wanted],
            ignore_conflicts=True,
        )
        rows = {trace.trace_id: trace for trace in Trace.objects.filter(project=project, trace_id__in=wanted)}
        Trace.objects.filter(pk__in=[rows[t].pk for t in wanted]).update(last_received_at=now)
        for trace in rows.values():
            trace.last_received_at = now
        return rows, set()
    quote = connection.ops.quote_name
    columns, select, params = insert_select_parts(connection, Trace, {
        "trace_id": "t", "project_id": f"%(project)s::{Trace._meta.get_field('project').db_type(connection)}",
        "first_received_at": "%(now)s::timestamptz",
        "first_received_day": "(%(now)s::timestamptz AT TIME ZONE 'UTC')::date",
        "last_received_at": "%(now)s::timestamptz",
    })
    sql = (
        f"INSERT INTO {quote(Trace._meta.db_table)} ({columns}) "
        f"SELECT {select} FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n "
        "ON CONFLICT (project_id, trace_id) DO UPDATE SET last_received_at = EXCLUDED.last_received_at "
        f"RETURNING {', '.join(quote(f.column) for f in _TRACE_FIELDS)}, (xmax = 0)"
    )
    params.update(ids=wanted, now=now, project=project.pk)
    attnames = [f.attname for f in _TRACE_FIELDS]
    rows, created = {}, set()
    with connection.wrap_database_errors, raw_cursor(connection) as cursor:
        cursor.execute(sql, params)
        for record in cursor.fetchall():
            values = list(record[:-1])
            for i, name in enumerate(attnames):
                if name in _JSON_FIELDS and isinstance(values[i], str):
                    values[i] = json.loads(values[i])
            trace = Trace.from_db(alias, attnames, values)
            trace.project = project
            rows[trace.trace_id] = trace
            if record[-1]:
                created.add(trace.trace_id)
    return rows, created


def stored_spans_find(*, keys: Iterable[tuple[int, str]],
                      days: Iterable[date] = ()) -> dict[tuple[int, str], tuple[str, str, bool]]:
    """(kind, node, node_inferred) of the stored spans among `keys` = (trace row pk, span id); `days`, the traces'
    first_received_day, lets Postgres read only their partitions. No project condition: the trace pks say it, and
    with one the planner picked the (project, node) index on a fresh day's partition (no statistics yet) and scanned
    it for every batch, instead of one probe of the unique key per span."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    connection = connections[router.db_for_read(Span)]
    if not on_postgres(connection):
        by_trace: dict[int, set[str]] = {}
        for trace_pk, span_id in keys:
            by_trace.setdefault(trace_pk, set()).add(span_id)
        condition = Q()
        for trace_pk, span_ids in by_trace.items():
            condition |= Q(trace_id=trace_pk, span_id__in=span_ids)
        rows = Span.objects.filter(condition).values_list("trace_id", "span_id", "kind", "node", "node_inferred")
        if days:
            rows = rows.filter(trace_day__in=set(days))
        return {(t, s): (kind, node, inferred) for t, s, kind, node, inferred in rows}
    table = connection.ops.quote_name(Span._meta.db_table)
    sql = (
        f"SELECT s.trace_id, s.span_id, s.kind, s.node, s.node_inferred FROM {table} s "
        "JOIN unnest(%s::bigint[], %s::text[]) AS k(t, id) ON s.trace_id = k.t AND s.span_id = k.id"
    )
    params = [[k[0] for k in keys], [k[1] for k in keys]]
    days = sorted(set(days))
    if days:
        # Spelled out, not a parameter: a constant list prunes partitions when the statement is planned.
        sql += " WHERE s.trace_day IN ({})".format(", ".join(f"'{day.isoformat()}'::date" for day in days))
    with connection.wrap_database_errors, raw_cursor(connection) as cursor:
        cursor.execute(sql, params)
        return {(t, s): (kind, node, inferred) for t, s, kind, node, inferred in cursor.fetchall()}


def traces_context_save(*, traces: list[tuple[Trace, list[str]]]) -> None:
    """Save the changed context fields of each (trace, changed field names), in one statement on Postgres.

    The caller holds the rows locked since `traces_upsert` read them, so writing every context column from the
    instance is the same as writing only the changed ones."""
    traces = [(trace, changed) for trace, changed in traces if changed]
    if not traces:
        return
    alias = router.db_for_write(Trace)
    connection = connections[alias]
    if not on_postgres(connection) or any(set(changed) - _CONTEXT_TYPES.keys() for _, changed in traces):
        for trace, changed in traces:
            trace.save(update_fields=sorted(set(changed)))
        return
    traces = sorted({trace.pk: trace for trace, _ in traces}.items())
    quote = connection.ops.quote_name
    names = list(_CONTEXT_TYPES)
    columns = {name: Trace._meta.get_field(name).column for name in names}
    arrays = [[pk for pk, _ in traces]]
    for name in names:
        if _CONTEXT_TYPES[name] == "jsonb":
            arrays.append([json.dumps(getattr(trace, name)) for _, trace in traces])
        else:
            arrays.append([getattr(trace, name) for _, trace in traces])
    unnest = ", ".join(["%s::bigint[]"] + [f"%s::{'text' if _CONTEXT_TYPES[n] == 'jsonb' else _CONTEXT_TYPES[n]}[]"
                                            for n in names])
    assignments = ", ".join(
        f"{quote(columns[n])} = v.{quote(n)}{'::jsonb' if _CONTEXT_TYPES[n] == 'jsonb' else ''}" for n in names
    )
    sql = (
        f"UPDATE {quote(Trace._meta.db_table)} AS t SET {assignments} "
        f"FROM unnest({unnest}) AS v(id, {', '.join(quote(n) for n in names)}) WHERE t.id = v.id"
    )
    with connection.wrap_database_errors, raw_cursor(connection) as cursor:
        cursor.execute(sql, arrays)
