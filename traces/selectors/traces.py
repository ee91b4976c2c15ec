"""Traces: one, the newest, the one filter every choice of traces goes through (the pages, the API, diagnosis runs),
the distinct releases and nodes, and figures over the project's traces."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime

from django.db import connection
from django.db.models import BooleanField, Count, Exists, Min, OuterRef, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL

from clear.db import postgres_fast_path
from clear.projects.models import Project
from traces.models import Span, Trace

NO_RELEASE = "(none)"  # how lists and filters name "sent without a release"


def trace_list(*, project: Project, release: str | None = None, outcome: str | None = None) -> QuerySet[Trace]:
    """The project's traces (of a release, with an outcome: see TraceFilter), newest first."""
    filters = TraceFilter(release=release or None, outcome=outcome or "")
    return trace_list_filtered(project=project, filters=filters).order_by("-start_time", "-pk")


def trace_get(*, project: Project, trace_id: str) -> Trace | None:
    return Trace.objects.filter(project=project, trace_id=trace_id.lower()).first()


def trace_expired_get(*, project: Project, trace_id: str):
    """The ExpiredTrace row of a trace retention removed (None: never expired, or never existed)."""
    from traces.models import ExpiredTrace

    return ExpiredTrace.objects.filter(project=project, trace_id=trace_id.lower()).first()


def trace_expired_message(*, expired) -> str:
    return (f"Trace {expired.trace_id} expired on {expired.expired_at:%Y-%m-%d} under this project's "
            f"{expired.retention_days}-day retention: its spans are gone; insights and tickets keep the figures "
            f"measured on it.")


def span_list_for_trace(*, project: Project, trace: Trace) -> QuerySet[Span]:
    return Span.objects.filter(project=project, trace=trace, trace_day=trace.first_received_day).order_by(
        "start_time", "pk")


# --- the trace filter -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceFilter:
    """Which traces a list, an API page or a diagnosis run covers; an empty field does not filter."""

    release: str | None = None  # "" (not None): the traces sent without a release; see release_filter_value
    outcome: str = ""  # success | failure | unknown (none recorded)
    node: str = ""  # traces with a span of this node
    q: str = ""  # the name or task id contains it, or the trace id starts with it
    since: datetime | None = None  # started at or after
    until: datetime | None = None  # started before
    task_id: str = ""
    trace_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # traces with every one of these tags

    @property
    def active(self) -> bool:
        return self.release is not None or any((self.outcome, self.node, self.q, self.since, self.until,
                                                self.task_id, self.trace_ids, self.tags))


def release_filter_value(label: str) -> str | None:
    """TraceFilter.release for a release as the lists name it: "" (any release) → None, NO_RELEASE → ""."""
    if not label:
        return None
    return "" if label == NO_RELEASE else label


def trace_list_filtered(*, project: Project, filters: TraceFilter) -> QuerySet[Trace]:
    """The project's traces that match `filters`, unordered (the caller orders, or pages by keyset)."""
    traces = Trace.objects.filter(project=project)
    if filters.release is not None:
        traces = traces.filter(release=filters.release)
    if filters.outcome == "unknown":
        traces = traces.filter(outcome__isnull=True)
    elif filters.outcome:
        traces = traces.filter(outcome=filters.outcome)
    if filters.node:
        traces = traces.filter(Exists(Span.objects.filter(
            trace=OuterRef("pk"), trace_day=OuterRef("first_received_day"), node=filters.node)))
    if filters.q:
        text = filters.q.strip()
        traces = traces.filter(Q(name__icontains=text) | Q(task_id__icontains=text)
                               | Q(trace_id__startswith=text.lower()))
    if filters.since:
        traces = traces.filter(start_time__gte=filters.since)
    if filters.until:
        traces = traces.filter(start_time__lt=filters.until)
    if filters.task_id:
        traces = traces.filter(task_id=filters.task_id)
    if filters.trace_ids:
        traces = traces.filter(trace_id__in=filters.trace_ids)
    if filters.tags:
        traces = _with_tags(traces, tags=filters.tags)
    return traces


def _with_tags(traces: QuerySet[Trace], *, tags: tuple[str, ...]) -> QuerySet[Trace]:
    """Traces with every one of `tags`: JSON containment where the database has it (Postgres), else (SQLite) one
    json_each probe of the tags array per tag. A capability, not a fast path: each database has only one form."""
    if connection.features.supports_json_field_contains:
        return traces.filter(tags__contains=list(tags))
    table, column = Trace._meta.db_table, Trace._meta.get_field("tags").column
    for tag in dict.fromkeys(tags):
        traces = traces.filter(RawSQL(f'EXISTS (SELECT 1 FROM json_each("{table}"."{column}") AS tag '
                                      "WHERE tag.value = %s)", (tag,), output_field=BooleanField()))
    return traces


# --- distinct releases and nodes ------------------------------------------------------------------------------------


def _distinct_postgres(model, field: str, *, project: Project) -> list[str]:
    """A "loose index scan" on the (project, field) index: one index probe per distinct value instead of reading
    every row (1M spans → 9 nodes in a millisecond rather than a second)."""
    table, column = model._meta.db_table, model._meta.get_field(field).column
    project_col = model._meta.get_field("project").column
    sql = (f"WITH RECURSIVE v(x) AS ((SELECT {column} FROM {table} WHERE {project_col} = %s ORDER BY {column} "
           f"LIMIT 1) UNION ALL SELECT (SELECT {column} FROM {table} WHERE {project_col} = %s AND {column} > v.x "
           f"ORDER BY {column} LIMIT 1) FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL")
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.pk, project.pk])
        return [row[0] for row in cursor.fetchall()]


@postgres_fast_path(_distinct_postgres)
def _distinct(model, field: str, *, project: Project) -> list[str]:
    """The distinct values of a text column of the project's rows, in order (SQLite reads them off the
    (project, field) index)."""
    return list(model.objects.filter(project=project).exclude(**{f"{field}__isnull": True}).order_by(field)
                .values_list(field, flat=True).distinct())


def trace_release_list(*, project: Project) -> list[str]:
    """The project's releases in order, NO_RELEASE for traces sent without one."""
    return [r or NO_RELEASE for r in _distinct(Trace, "release", project=project)]


def span_node_list(*, project: Project) -> list[str]:
    return [n for n in _distinct(Span, "node", project=project) if n]


# --- figures --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseStats:
    release: str
    traces: int
    failures: int

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.traces if self.traces else None


@dataclass(frozen=True)
class ProjectTraceStats:
    traces: int
    failures: int
    successes: int
    spans: int
    input_tokens: int
    output_tokens: int
    releases: list[ReleaseStats]

    @property
    def failure_rate(self) -> float | None:
        judged = self.failures + self.successes
        return self.failures / judged if judged else None


def trace_stats(*, project: Project) -> ProjectTraceStats:
    totals = Trace.objects.filter(project=project).aggregate(
        traces=Count("pk"),
        failures=Count("pk", filter=Q(outcome=Trace.Outcome.FAILURE)),
        successes=Count("pk", filter=Q(outcome=Trace.Outcome.SUCCESS)),
        spans=Sum("span_count"),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
    )
    releases = [
        ReleaseStats(release=row["release"] or NO_RELEASE, traces=row["traces"], failures=row["failures"])
        for row in Trace.objects.filter(project=project).values("release").annotate(
            traces=Count("pk"), failures=Count("pk", filter=Q(outcome=Trace.Outcome.FAILURE))
        ).order_by("release")
    ]
    return ProjectTraceStats(
        traces=totals["traces"] or 0, failures=totals["failures"] or 0, successes=totals["successes"] or 0,
        spans=totals["spans"] or 0, input_tokens=totals["input_tokens"] or 0,
        output_tokens=totals["output_tokens"] or 0, releases=releases,
    )


def release_first_received(*, project: Project, releases: list[str]) -> dict[str, datetime]:
    """When Clear first received a trace of each release ({release: datetime}); releases with no trace are absent."""
    rows = (Trace.objects.filter(project=project, release__in=releases).values("release")
            .annotate(first=Min("first_received_at")))
    return {row["release"]: row["first"] for row in rows}


def _release_newest_postgres(*, project_id) -> str:
    # A skip scan of the (project, release, first_received_at) index: one probe per release for its first trace,
    # instead of grouping every trace of the project (75 ms at 500k traces, on every overview).
    table = Trace._meta.db_table
    sql = (
        f"WITH RECURSIVE r(release) AS ("
        f"(SELECT release FROM {table} WHERE project_id = %(p)s AND release > '' ORDER BY release LIMIT 1) "
        f"UNION ALL SELECT (SELECT t.release FROM {table} t WHERE t.project_id = %(p)s AND t.release > r.release "
        f"ORDER BY t.release LIMIT 1) FROM r WHERE r.release IS NOT NULL) "
        f"SELECT r.release, (SELECT t.first_received_at FROM {table} t WHERE t.project_id = %(p)s "
        f"AND t.release = r.release ORDER BY t.first_received_at LIMIT 1) AS first "
        f"FROM r WHERE r.release IS NOT NULL ORDER BY first DESC, release DESC LIMIT 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"p": project_id})
        row = cursor.fetchone()
    return row[0] if row else ""


@postgres_fast_path(_release_newest_postgres)
def trace_release_newest(*, project_id) -> str:
    """The release whose first trace arrived last ("" when no trace names a release). First arrival, not the latest
    trace: an old release still sending traces from production is not the newest one."""
    row = (Trace.objects.filter(project_id=project_id).exclude(release="").values("release")
           .annotate(first=Min("first_received_at")).order_by("-first", "-release").first())
    return row["release"] if row else ""


def _trace_outcomes_postgres(*, project_id, trace_pks: list[int]) -> dict[int, tuple[str, str]]:
    # One array parameter, probed on the primary key: a join from the runs' traces was planned as a scan of every
    # trace of the project (76 ms at 500k traces, on every insight page).
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, trace_id, outcome FROM {Trace._meta.db_table} WHERE project_id = %s "
                       "AND id = ANY(%s) AND outcome IN ('failure', 'success')", [project_id, trace_pks])
        return {pk: (trace_id, outcome) for pk, trace_id, outcome in cursor.fetchall()}


@postgres_fast_path(_trace_outcomes_postgres)
def _trace_outcomes(*, project_id, trace_pks: list[int]) -> dict[int, tuple[str, str]]:
    rows = Trace.objects.filter(project_id=project_id, pk__in=trace_pks, outcome__in=["failure", "success"])
    return {pk: (trace_id, outcome) for pk, trace_id, outcome in rows.values_list("pk", "trace_id", "outcome")}


def trace_outcomes_for(*, project: Project, trace_pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    """{trace pk: (trace id, outcome)} of these traces of the project that have a recorded outcome (failure or
    success)."""
    pks = sorted(set(trace_pks))
    return _trace_outcomes(project_id=project.pk, trace_pks=pks) if pks else {}


# --- the span partitions a read touches -----------------------------------------------------------------------------


def _trace_days_postgres(*, project_id: int, trace_pks: list[int]) -> list[date]:
    # One array parameter: `pk__in` would send (and psycopg split) one placeholder per trace.
    table, pk = Trace._meta.db_table, Trace._meta.pk.column
    day, project_col = Trace._meta.get_field("first_received_day").column, Trace._meta.get_field("project").column
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT {day} FROM {table} WHERE {project_col} = %s AND {pk} = ANY(%s) ORDER BY 1",
                       [project_id, trace_pks])
        return [row[0] for row in cursor.fetchall()]


@postgres_fast_path(_trace_days_postgres)
def _trace_days(*, project_id: int, trace_pks: list[int] | QuerySet) -> list[date]:
    return list(Trace.objects.filter(project_id=project_id, pk__in=trace_pks).order_by("first_received_day")
                .values_list("first_received_day", flat=True).distinct())


def trace_days_for(*, project: Project | int, trace_pks: Iterable[int] | QuerySet) -> list[date]:
    """The distinct first-received days of these traces of the project (a Project or its pk), oldest first.

    A span read that knows its traces adds `trace_day__in=` these days (Span.trace_day is the trace's
    first_received_day): on Postgres the planner then reads only those daily partitions of `traces_span` instead of
    probing the index of every one (traces/services/partitions.py); on SQLite the filter is harmless. `trace_pks`:
    pks, or a QuerySet of them (a subquery); one query either way, none for an empty list."""
    project_id = getattr(project, "pk", project)
    if isinstance(trace_pks, QuerySet):  # a subquery: the ORM form on every database
        return _trace_days.portable(project_id=project_id, trace_pks=trace_pks)
    pks = list(trace_pks)
    return _trace_days(project_id=project_id, trace_pks=pks) if pks else []
