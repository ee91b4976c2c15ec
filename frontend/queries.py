"""Read-only queries the pages need and the other apps' selectors do not offer; every one is scoped to a project.

Nothing here writes. Lists are paged by keyset (see `frontend.pagination`), aggregates run as one grouped query each,
so a page costs the same number of queries with 5 rows or 50.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import connection
from django.db.models import Case, Count, Exists, F, FloatField, Max, Min, OuterRef, Q, QuerySet, Subquery, Sum, When
from django.db.models.functions import Coalesce, Trunc

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Feedback, FeedbackCorrection
from traces.models import Span, Trace

# The workflow graph looks at this many of the newest matching traces: enough to see every path the agent takes,
# bounded so the page stays fast on a project with millions of spans.
GRAPH_TRACE_SAMPLE = 2000


# ---------------------------------------------------------------------------------------------------------------
# failing verdicts


def failing_feedback() -> QuerySet[Feedback]:
    """Failing verdicts nobody marked wrong: a correction covers its feedback and the same judge's verdicts on the
    same trace and target in other runs (as insight clustering treats them)."""
    corrected = FeedbackCorrection.objects.filter(
        feedback__trace_id=OuterRef("trace_id"), feedback__judge=OuterRef("judge"),
        feedback__target_span_id=OuterRef("target_span_id"))
    return Feedback.objects.filter(verdict=Feedback.Verdict.FAIL).exclude(Exists(corrected))


def corrections_for(*, project: Project, feedback: list[Feedback]) -> dict[tuple, FeedbackCorrection]:
    """{(trace pk, judge, target span id): the correction} covering these feedback rows; one query."""
    traces = {f.trace_id for f in feedback}
    if not traces:
        return {}
    rows = (FeedbackCorrection.objects.filter(project=project, feedback__trace_id__in=traces)
            .select_related("feedback", "created_by").order_by("created_at"))
    return {(c.feedback.trace_id, c.feedback.judge, c.feedback.target_span_id): c for c in rows}


# ---------------------------------------------------------------------------------------------------------------
# traces


@dataclass(frozen=True)
class TraceFilter:
    release: str = ""
    outcome: str = ""  # "success" | "failure" | "unknown" | ""
    node: str = ""
    q: str = ""
    since: datetime | None = None
    until: datetime | None = None

    @property
    def active(self) -> bool:
        return any((self.release, self.outcome, self.node, self.q, self.since, self.until))


def trace_search(*, project: Project, filters: TraceFilter) -> QuerySet[Trace]:
    """Traces matching the filters, each with its count of failing verdicts; unordered (the pager orders)."""
    traces = Trace.objects.filter(project=project)
    if filters.release:
        traces = traces.filter(release="" if filters.release == "(none)" else filters.release)
    if filters.outcome == "unknown":
        traces = traces.filter(outcome__isnull=True)
    elif filters.outcome:
        traces = traces.filter(outcome=filters.outcome)
    if filters.node:
        traces = traces.filter(Exists(Span.objects.filter(trace=OuterRef("pk"), node=filters.node)))
    if filters.q:
        text = filters.q.strip()
        traces = traces.filter(Q(name__icontains=text) | Q(task_id__icontains=text)
                               | Q(trace_id__startswith=text.lower()))
    if filters.since:
        traces = traces.filter(start_time__gte=filters.since)
    if filters.until:
        traces = traces.filter(start_time__lt=filters.until)
    failing = (failing_feedback().filter(trace=OuterRef("pk")).order_by()
               .values("trace").annotate(n=Count("pk")).values("n"))
    return traces.annotate(failing_feedback=Coalesce(Subquery(failing[:1]), 0))


def _distinct(model, field: str, *, project: Project) -> list[str]:
    """The distinct values of a text column of the project's rows, in order, by a "loose index scan" on the
    (project, field) index: one index probe per distinct value instead of reading every row (1M spans → 9 nodes
    in a millisecond rather than a second)."""
    table, column = model._meta.db_table, model._meta.get_field(field).column
    project_col = model._meta.get_field("project").column
    sql = (f"WITH RECURSIVE v(x) AS ((SELECT {column} FROM {table} WHERE {project_col} = %s ORDER BY {column} "
           f"LIMIT 1) UNION ALL SELECT (SELECT {column} FROM {table} WHERE {project_col} = %s AND {column} > v.x "
           f"ORDER BY {column} LIMIT 1) FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL")
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.pk, project.pk])
        return [row[0] for row in cursor.fetchall()]


def trace_releases(*, project: Project) -> list[str]:
    return [r or "(none)" for r in _distinct(Trace, "release", project=project)]


def span_nodes(*, project: Project) -> list[str]:
    return [n for n in _distinct(Span, "node", project=project) if n]


def trace_spans(*, project: Project, trace: Trace, limit: int) -> list[Span]:
    """The trace's spans in start order, at most `limit` (deferring nothing: the viewer shows one span's content)."""
    return list(Span.objects.filter(project=project, trace=trace).order_by("start_time", "pk")[:limit])


def trace_feedback_runs(*, project: Project, trace: Trace) -> list[dict]:
    """The runs that left feedback on this trace, newest first: [{run_id, name, created_at, failing}]."""
    rows = (Feedback.objects.filter(project=project, trace=trace).values("run_id", "run__name", "run__created_at")
            .annotate(failing=Count("pk", filter=Q(verdict=Feedback.Verdict.FAIL)), total=Count("pk"))
            .order_by("-run__created_at"))
    return [{"run_id": r["run_id"], "name": r["run__name"], "created_at": r["run__created_at"],
             "failing": r["failing"], "total": r["total"]} for r in rows]


def trace_feedback(*, project: Project, trace: Trace, run_id) -> list[Feedback]:
    return list(Feedback.objects.filter(project=project, trace=trace, run_id=run_id)
                .order_by("target_span_id", "judge"))


def feedback_get(*, project: Project, feedback_id: int) -> Feedback | None:
    return Feedback.objects.filter(project=project, pk=feedback_id).select_related("trace").first()


# ---------------------------------------------------------------------------------------------------------------
# overview


@dataclass
class VolumeBucket:
    start: datetime
    total: int = 0
    failures: int = 0
    successes: int = 0

    @property
    def judged(self) -> int:
        return self.failures + self.successes

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.judged if self.judged else None


@dataclass
class VolumeSeries:
    unit: str  # minute | hour | day | week
    buckets: list[VolumeBucket] = field(default_factory=list)


_UNITS = (("minute", timedelta(minutes=1)), ("hour", timedelta(hours=1)), ("day", timedelta(days=1)),
          ("week", timedelta(weeks=1)))
_MAX_BUCKETS = 96
_SERIES_WINDOW = timedelta(days=120)


def _floor(moment: datetime, unit: str) -> datetime:
    moment = moment.astimezone(dt_timezone.utc)
    if unit == "minute":
        return moment.replace(second=0, microsecond=0)
    if unit == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday()) if unit == "week" else day


def trace_volume_series(*, project: Project) -> VolumeSeries | None:
    """Traces and failures per time bucket over the project's latest activity (up to 120 days before its newest
    trace); the bucket is the smallest of minute/hour/day/week that keeps the chart under ~100 bars."""
    traces = Trace.objects.filter(project=project, start_time__isnull=False)
    bounds = traces.aggregate(lo=Min("start_time"), hi=Max("start_time"))
    if bounds["hi"] is None:
        return None
    hi = bounds["hi"]
    lo = max(bounds["lo"], hi - _SERIES_WINDOW)
    unit, step = _UNITS[-1]
    for candidate, delta in _UNITS:
        if (hi - lo) / delta < _MAX_BUCKETS:
            unit, step = candidate, delta
            break
    rows = (traces.filter(start_time__gte=lo).annotate(bucket=Trunc("start_time", unit, tzinfo=dt_timezone.utc))
            .values("bucket").annotate(total=Count("pk"), failures=Count("pk", filter=Q(outcome="failure")),
                                       successes=Count("pk", filter=Q(outcome="success"))).order_by("bucket"))
    found = {_floor(r["bucket"], unit): r for r in rows}
    series = VolumeSeries(unit=unit)
    moment, end = _floor(lo, unit), _floor(hi, unit)
    while moment <= end:
        row = found.get(moment) or {}
        series.buckets.append(VolumeBucket(start=moment, total=row.get("total", 0),
                                           failures=row.get("failures", 0), successes=row.get("successes", 0)))
        moment += step
    return series


@dataclass(frozen=True)
class JudgeSpend:
    runs: int
    cost: float
    input_tokens: int
    output_tokens: int
    feedback_failing: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def judge_spend(*, project: Project) -> JudgeSpend:
    totals = DiagnosisRun.objects.filter(project=project).aggregate(
        runs=Count("pk"), cost=Sum("cost"), input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"))
    failing = failing_feedback().filter(project=project).count()
    return JudgeSpend(runs=totals["runs"] or 0, cost=totals["cost"] or 0.0, input_tokens=totals["input_tokens"] or 0,
                      output_tokens=totals["output_tokens"] or 0, feedback_failing=failing)


def latest_run(*, project: Project) -> DiagnosisRun | None:
    return DiagnosisRun.objects.filter(project=project).order_by("-created_at").first()


# ---------------------------------------------------------------------------------------------------------------
# nodes and the workflow graph


@dataclass
class NodeStats:
    node: str
    spans: int
    traces: int
    errors: int
    failing: int  # spans with a failing verdict from any run
    bad: int  # spans with an error or a failing verdict
    agent_spans: int = 0

    @property
    def pass_rate(self) -> float | None:
        return (self.spans - self.bad) / self.spans if self.spans else None


def sample_trace_pks(*, project: Project, release: str = "", sample: int) -> list[int]:
    """The pks of the newest `sample` traces (of `release`): one index scan. A literal list, so the span queries
    that use it are planned as index lookups by trace rather than a scan of every span."""
    traces = Trace.objects.filter(project=project)
    if release:
        traces = traces.filter(release="" if release == "(none)" else release)
    pks = list(traces.filter(start_time__isnull=False).order_by("-start_time", "-pk")
               .values_list("pk", flat=True)[:sample])
    if len(pks) < sample:  # a small project: traces with no start time yet (still arriving) too
        pks += traces.filter(start_time__isnull=True).order_by("-pk").values_list("pk", flat=True)[:sample - len(pks)]
    return pks


def _spans_in_scope(*, project: Project, release: str = "", sample: int | None = None,
                    trace_pks: list[int] | None = None) -> QuerySet[Span]:
    spans = Span.objects.filter(project=project)
    if sample:
        if trace_pks is None:
            trace_pks = sample_trace_pks(project=project, release=release, sample=sample)
        return spans.filter(trace_id__in=trace_pks)
    if release:
        spans = spans.filter(trace__release="" if release == "(none)" else release)
    return spans


def node_stats(*, project: Project, release: str = "", sample: int | None = None,
               trace_pks: list[int] | None = None) -> list[NodeStats]:
    """Per node: spans, traces, error spans, spans with a failing verdict, and the pass rate (share of spans with
    neither), over the newest `sample` traces (all when None). Two grouped queries: the spans, then the spans with
    a failing verdict (a semi-join, not a probe of the verdicts per span)."""
    spans = _spans_in_scope(project=project, release=release, sample=sample, trace_pks=trace_pks)
    rows = (spans.values("node").annotate(
        spans=Count("pk"), traces=Count("trace_id", distinct=True), errors=Count("pk", filter=Q(status="error")),
        agent_spans=Count("pk", filter=Q(kind=Span.Kind.AGENT))).order_by("node"))
    failing = failing_feedback().filter(project=project, trace_id=OuterRef("trace_id"),
                                        target_span_id=OuterRef("span_id"))
    failed = dict((node, (n, n_error)) for node, n, n_error in
                  spans.filter(Exists(failing)).values("node")
                  .annotate(n=Count("pk"), n_error=Count("pk", filter=Q(status="error")))
                  .values_list("node", "n", "n_error").order_by())
    stats = []
    for row in rows:
        n, n_error = failed.get(row["node"], (0, 0))
        stats.append(NodeStats(**row, failing=n, bad=row["errors"] + n - n_error))
    return stats


def by_rank(insights: QuerySet) -> QuerySet:
    """Insights with `rank`: the frequency, with "other" buckets (statements that fit no pattern) after every
    pattern (frequency is at most 1), so one keyset field orders the list."""
    return insights.annotate(rank=Case(When(is_other=True, then=F("frequency") - 2), default=F("frequency"),
                                       output_field=FloatField()))


def insight_counts_by_node(*, project: Project) -> dict[str, int]:
    """{node: listed node-level insights} (rejected, merged-away and "other" buckets aside); one query."""
    from diagnosis.models import Insight
    from diagnosis.selectors import insight_list

    rows = (insight_list(project=project, level=Insight.Level.NODE, include_other=False).order_by()
            .values("node").annotate(n=Count("pk", distinct=True)).values_list("node", "n"))
    return dict(rows)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "call" (parent span → child span) | "handoff" (one sibling agent span, then the next)
    count: int


_SIBLING_GROUP_MAX = 200


def _handoffs(group: list[tuple]) -> list[tuple[str, str]]:
    """(from node, to node) for one set of sibling agent spans [(node, start, end)] in start order: each span's
    immediate predecessors are the siblings that ended before it started with no other such sibling in between,
    so two agents running side by side hand off to whoever runs after both, never to each other."""
    if len(group) > _SIBLING_GROUP_MAX:  # pathological fan-out: consecutive pairs only
        return [(a[0], b[0]) for a, b in zip(group, group[1:], strict=False)]
    pairs = []
    for index, (node, start, _end) in enumerate(group):
        before = [p for p in group[:index] if p[2] <= start]
        for previous in before:
            if not any(other is not previous and previous[2] <= other[1] for other in before):
                pairs.append((previous[0], node))
    return pairs


def _call_counts(*, project: Project, trace_pks: list[int]) -> list[tuple[str, str, int]]:
    """(parent node, child node, spans) over the given traces: one hash self-join of their spans."""
    table, col = Span._meta.db_table, {f.name: f.column for f in Span._meta.concrete_fields}
    sql = (f"SELECT p.{col['node']}, c.{col['node']}, count(*) FROM {table} AS c JOIN {table} AS p "
           f"ON p.{col['trace']} = c.{col['trace']} AND p.{col['span_id']} = c.{col['parent_span_id']} "
           f"WHERE c.{col['project']} = %s AND p.{col['project']} = %s AND c.{col['trace']} = ANY(%s) "
           f"AND p.{col['trace']} = ANY(%s) AND c.{col['parent_span_id']} <> '' GROUP BY 1, 2")
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.pk, project.pk, trace_pks, trace_pks])
        return cursor.fetchall()


def workflow_edges(*, project: Project, release: str = "", sample: int = GRAPH_TRACE_SAMPLE,
                   trace_pks: list[int] | None = None) -> list[Edge]:
    """Transitions between nodes observed in the newest `sample` traces: a span of node A with a child of node B
    (call), and sequential AGENT spans under one parent (hand-off: B started after A ended, with no sibling agent
    in between). Self-transitions are left out. Two queries."""
    if trace_pks is None:
        trace_pks = sample_trace_pks(project=project, release=release, sample=sample)
    spans = _spans_in_scope(project=project, release=release, sample=sample, trace_pks=trace_pks)
    edges = [Edge(parent, node, "call", n) for parent, node, n in _call_counts(project=project, trace_pks=trace_pks)
             if parent != node]
    agents = (spans.filter(kind=Span.Kind.AGENT).order_by("trace_id", "parent_span_id", "start_time", "pk")
              .values_list("trace_id", "parent_span_id", "node", "start_time", "end_time"))
    counts: dict[tuple[str, str], int] = {}
    group: list[tuple] = []
    key = None
    for trace_pk, parent, node, start, end in agents.iterator(chunk_size=5000):
        if (trace_pk, parent) != key:
            for pair in _handoffs(group):
                counts[pair] = counts.get(pair, 0) + 1
            group, key = [], (trace_pk, parent)
        group.append((node, start, max(end or start, start)))
    for pair in _handoffs(group):
        counts[pair] = counts.get(pair, 0) + 1
    edges += [Edge(a, b, "handoff", n) for (a, b), n in counts.items() if a and b and a != b]
    return sorted(edges, key=lambda e: (e.kind, -e.count, e.source, e.target))


# ---------------------------------------------------------------------------------------------------------------
# diagnosis runs


def runs_with_failing(runs: QuerySet[DiagnosisRun]) -> QuerySet[DiagnosisRun]:
    """The runs, each with `failing_feedback`: its count of failing verdicts (one subquery, not one per row)."""
    failing = (failing_feedback().filter(run=OuterRef("pk")).order_by()
               .values("run").annotate(n=Count("pk")).values("n"))
    return runs.annotate(failing_feedback=Coalesce(Subquery(failing[:1]), 0))


def run_failing_feedback(*, project: Project, run: DiagnosisRun, limit: int = 100) -> list[Feedback]:
    return list(Feedback.objects.filter(project=project, run=run, verdict=Feedback.Verdict.FAIL)
                .select_related("trace").order_by("trace__start_time", "trace_id", "judge", "target_span_id")[:limit])
