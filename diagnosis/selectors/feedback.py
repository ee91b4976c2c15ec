"""Verdicts (Feedback): lists, the failing verdicts nobody marked wrong, their corrections, and traces and runs with
their count of failing verdicts."""

from __future__ import annotations

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from clear.db import postgres_fast_path
from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Feedback, FeedbackCorrection
from traces.models import Trace
from traces.selectors import TraceFilter, trace_list_filtered


def feedback_list(*, project: Project, run: DiagnosisRun | None = None, trace: Trace | None = None,
                  verdict: str | None = None, judge: str | None = None) -> QuerySet[Feedback]:
    feedback = Feedback.objects.filter(project=project)
    if run is not None:
        feedback = feedback.filter(run=run)
    if trace is not None:
        feedback = feedback.filter(trace=trace)
    if verdict:
        feedback = feedback.filter(verdict=verdict)
    if judge:
        feedback = feedback.filter(judge=judge)
    return feedback.select_related("trace").order_by("trace_id", "judge", "target_span_id")


def feedback_get(*, project: Project, feedback_id: int) -> Feedback | None:
    return Feedback.objects.filter(project=project, pk=feedback_id).select_related("trace").first()


def _failing_feedback() -> QuerySet[Feedback]:
    """Failing verdicts nobody marked wrong: a correction covers its feedback and the same judge's verdicts on the
    same trace and target in other runs (as insight clustering treats them). Not scoped: for the subqueries below,
    correlated to a row of the project (a trace, a run); anything else reads feedback_failing_list."""
    corrected = FeedbackCorrection.objects.filter(
        feedback__trace_id=OuterRef("trace_id"), feedback__judge=OuterRef("judge"),
        feedback__target_span_id=OuterRef("target_span_id"))
    return Feedback.objects.filter(verdict=Feedback.Verdict.FAIL).exclude(Exists(corrected))


def feedback_failing_list(*, project: Project) -> QuerySet[Feedback]:
    """The project's failing verdicts nobody marked wrong (see _failing_feedback)."""
    return _failing_feedback().filter(project=project)


def feedback_failing_trace_count(*, project: Project) -> int:
    """How many traces have a failing verdict nobody marked wrong, by the latest verdict of each judge on each trace:
    a re-run of the same traces replaces its judges' earlier verdicts instead of adding to them. A judge's verdict
    on a trace is what it said in the newest run that has a verdict of it on that trace (an errored or skipped check
    leaves none). One query: the failing rows with no newer run's verdict of the same judge on the same trace."""
    newer = Feedback.objects.filter(
        Q(run__created_at__gt=OuterRef("run__created_at"))
        | Q(run__created_at=OuterRef("run__created_at"), run_id__gt=OuterRef("run_id")),
        trace_id=OuterRef("trace_id"), judge=OuterRef("judge"), verdict__isnull=False)
    return (feedback_failing_list(project=project).exclude(Exists(newer)).order_by()
            .aggregate(n=Count("trace_id", distinct=True))["n"])


def feedback_failing_list_for_run(*, project: Project, run: DiagnosisRun, limit: int = 100) -> list[Feedback]:
    return list(Feedback.objects.filter(project=project, run=run, verdict=Feedback.Verdict.FAIL)
                .select_related("trace").order_by("trace__start_time", "trace_id", "judge", "target_span_id")[:limit])


def feedback_list_for_trace(*, project: Project, trace: Trace, run_id) -> list[Feedback]:
    """One run's verdicts on the trace, by target span and judge."""
    return list(Feedback.objects.filter(project=project, trace=trace, run_id=run_id)
                .order_by("target_span_id", "judge"))


def feedback_runs_for_trace(*, project: Project, trace: Trace) -> list[dict]:
    """The runs that left feedback on this trace, newest first: [{run_id, name, created_at, failing, total}]."""
    rows = (Feedback.objects.filter(project=project, trace=trace).values("run_id", "run__name", "run__created_at")
            .annotate(failing=Count("pk", filter=Q(verdict=Feedback.Verdict.FAIL)), total=Count("pk"))
            .order_by("-run__created_at"))
    return [{"run_id": r["run_id"], "name": r["run__name"], "created_at": r["run__created_at"],
             "failing": r["failing"], "total": r["total"]} for r in rows]


def feedback_correction_map(*, project: Project, feedback: list[Feedback]) -> dict[tuple, FeedbackCorrection]:
    """{(trace pk, judge, target span id): the correction} covering these feedback rows; one query."""
    traces = {f.trace_id for f in feedback}
    if not traces:
        return {}
    rows = (FeedbackCorrection.objects.filter(project=project, feedback__trace_id__in=traces)
            .select_related("feedback", "created_by").order_by("created_at"))
    return {(c.feedback.trace_id, c.feedback.judge, c.feedback.target_span_id): c for c in rows}


def trace_list_with_failing(*, project: Project, filters: TraceFilter) -> QuerySet[Trace]:
    """The traces `filters` matches, each with `failing_feedback`, its count of failing verdicts nobody marked wrong
    (one subquery, not one per row); unordered (the pager orders)."""
    failing = (_failing_feedback().filter(trace=OuterRef("pk")).order_by()
               .values("trace").annotate(n=Count("pk")).values("n"))
    return trace_list_filtered(project=project, filters=filters).annotate(
        failing_feedback=Coalesce(Subquery(failing[:1]), 0))


def diagnosis_run_list_with_failing(*, project: Project) -> QuerySet[DiagnosisRun]:
    """The project's runs, newest first, each with `failing_feedback`: its count of failing verdicts nobody marked
    wrong (one subquery, not one per row)."""
    failing = (_failing_feedback().filter(run=OuterRef("pk")).order_by()
               .values("run").annotate(n=Count("pk")).values("n"))
    runs = DiagnosisRun.objects.filter(project=project).order_by("-created_at").select_related("created_by")
    return runs.annotate(failing_feedback=Coalesce(Subquery(failing[:1]), 0))


def _failing_spans_postgres(*, project: Project, trace_pks: list[int]) -> set[tuple[int, str]]:
    traces = RawSQL("SELECT unnest(%s::bigint[])", [trace_pks])  # one array parameter, not 2,000 placeholders
    return set(feedback_failing_list(project=project).filter(trace_id__in=traces, target_span_id__isnull=False)
               .values_list("trace_id", "target_span_id").distinct())


@postgres_fast_path(_failing_spans_postgres)
def feedback_failing_spans(*, project: Project, trace_pks: list[int]) -> set[tuple[int, str]]:
    """(trace pk, span id) of the spans of these traces that a verdict nobody marked wrong fails; one query,
    by the verdicts' trace index."""
    return set(feedback_failing_list(project=project).filter(trace_id__in=trace_pks, target_span_id__isnull=False)
               .values_list("trace_id", "target_span_id").distinct())
