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

from clear.db import postgres_fast_path
from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Feedback, FeedbackCorrection
from traces.models import Span, Trace

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
# insights


def by_rank(insights: QuerySet) -> QuerySet:
    """Insights with `rank`: the frequency, with patterns not associated with failure (lift interval including 1)
    after those associated or of unknown association, and "other" buckets (statements that fit no pattern) last
    (frequency is at most 1, so the offsets keep the groups apart), so one keyset field orders the list."""
    return insights.annotate(rank=Case(When(is_other=True, then=F("frequency") - 4),
                                       When(lift_low__isnull=False, lift_low__lte=1, then=F("frequency") - 2),
                                       default=F("frequency"), output_field=FloatField()))


def insight_counts_by_node(*, project: Project) -> dict[str, int]:
    """{node: listed node-level insights} (rejected, merged-away and "other" buckets aside); one query."""
    from diagnosis.models import Insight
    from diagnosis.selectors import insight_list

    rows = (insight_list(project=project, level=Insight.Level.NODE, include_other=False).order_by()
            .values("node").annotate(n=Count("pk", distinct=True)).values_list("node", "n"))
    return dict(rows)


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
