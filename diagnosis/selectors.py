"""Reads of the diagnosis app, always scoped to a project."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count, QuerySet

from clear.projects.models import Project
from diagnosis.errors import DiagnosisRunNotFoundError, RubricNotFoundError
from diagnosis.models import DiagnosisRun, Feedback, Rubric
from traces.models import Trace


def diagnosis_run_list(*, project: Project) -> QuerySet[DiagnosisRun]:
    return DiagnosisRun.objects.filter(project=project).order_by("-created_at")


def diagnosis_run_get(*, project: Project, run_id) -> DiagnosisRun:
    try:
        run = DiagnosisRun.objects.filter(project=project, pk=run_id).first()
    except (ValueError, TypeError):  # not a UUID
        run = None
    if run is None:
        raise DiagnosisRunNotFoundError(f"No diagnosis run {run_id} in this project")
    return run


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


def rubric_list(*, project: Project, enabled: bool | None = None) -> QuerySet[Rubric]:
    rubrics = Rubric.objects.filter(project=project)
    if enabled is not None:
        rubrics = rubrics.filter(enabled=enabled)
    return rubrics.order_by("name")


def rubric_get(*, project: Project, rubric_id: int) -> Rubric:
    rubric = Rubric.objects.filter(project=project, pk=rubric_id).first()
    if rubric is None:
        raise RubricNotFoundError(f"No rubric {rubric_id} in this project")
    return rubric


@dataclass
class RunSummary:
    traces_total: int
    traces_judged: int
    traces_skipped: int
    feedback_by_status: dict[str, int] = field(default_factory=dict)
    failing_by_judge: dict[str, int] = field(default_factory=dict)
    failing_traces: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    errors: int = 0
    dropped_evidence: int = 0
    contrastive: dict | None = None  # the run-level contrastive judge's report: status, reason, findings


def diagnosis_run_summary(*, project: Project, run: DiagnosisRun) -> RunSummary:
    feedback = Feedback.objects.filter(project=project, run=run)
    by_status = dict(Counter(dict(feedback.values_list("status").annotate(n=Count("pk")).values_list("status", "n"))))
    failing = feedback.filter(verdict=Feedback.Verdict.FAIL)
    by_judge = dict(failing.values_list("judge").annotate(n=Count("pk")).order_by("-n", "judge")
                    .values_list("judge", "n"))
    return RunSummary(
        traces_total=run.total_count, traces_judged=run.done_count, traces_skipped=run.skipped_count,
        feedback_by_status=by_status, failing_by_judge=by_judge,
        failing_traces=failing.values("trace_id").distinct().count(),
        input_tokens=run.input_tokens, output_tokens=run.output_tokens, cost=run.cost, errors=run.error_count,
        dropped_evidence=run.dropped_evidence, contrastive=(run.config or {}).get("contrastive"),
    )


# --- insights (diagnosis/insights/) --------------------------------------------------------------------------------


def insight_list(*, project: Project, level: str | None = None, node: str | None = None,
                 severity: str | list[str] | None = None, status: str | list[str] | None = None,
                 release: str | None = None, run: DiagnosisRun | None = None, review: str | None = None,
                 include_rejected: bool = False, include_other: bool = True,
                 include_merged: bool = False) -> QuerySet:
    """The project's insights, most recently seen and most frequent first. Rejected insights, and insights merged
    into another, are hidden unless asked for (or `review="rejected"`); "other" buckets (statements that fit no
    cluster) are listed unless include_other=False. release / run: insights that occurred in traces of that release
    / in that run."""
    from diagnosis.models import Insight

    insights = Insight.objects.filter(project=project)
    if level:
        insights = insights.filter(level=level)
    if node is not None:
        insights = insights.filter(node=node)
    if severity:
        insights = insights.filter(severity__in=[severity] if isinstance(severity, str) else list(severity))
    if status:
        insights = insights.filter(status__in=[status] if isinstance(status, str) else list(status))
    if review:
        insights = insights.filter(review=review)
    elif not include_rejected:
        insights = insights.exclude(review=Insight.Review.REJECTED)
    if not include_merged:
        insights = insights.filter(merged_into__isnull=True)
    if not include_other:
        insights = insights.filter(is_other=False)
    if run is not None:
        insights = insights.filter(occurrences__run=run)
    if release is not None:
        insights = insights.filter(occurrences__releases__has_key=release)
    return insights.distinct().annotate(not_associated=not_associated_with_failure()).order_by(
        "is_other", "not_associated", "-last_seen", "-frequency", "-count", "pk")


def not_associated_with_failure():
    """1 for an insight whose lift interval includes 1 (it shows in succeeding traces as often as in failing ones):
    listed after those associated with failure, or whose association is unknown (no outcomes)."""
    from django.db.models import Case, IntegerField, Value, When

    return Case(When(lift_low__isnull=False, lift_low__lte=1, then=Value(1)), default=Value(0),
                output_field=IntegerField())


def insight_get(*, project: Project, insight_id) -> "Insight":  # noqa: F821
    from diagnosis.insights.errors import InsightNotFoundError
    from diagnosis.models import Insight

    try:
        insight = Insight.objects.filter(project=project, pk=int(insight_id)).first()
    except (TypeError, ValueError):
        insight = None
    if insight is None:
        raise InsightNotFoundError(f"No insight {insight_id} in this project")
    return insight


def insight_evidence_list(*, project: Project, insight, run: DiagnosisRun | None = None) -> QuerySet:
    """Verified citations of the insight (and of insights merged into it), newest run first."""
    from diagnosis.models import InsightEvidence

    evidence = InsightEvidence.objects.filter(insight__project=project, insight=insight)
    if run is not None:
        evidence = evidence.filter(run=run)
    return evidence.select_related("trace", "run").order_by("-run__created_at", "trace_id", "span_id", "pk")


def insight_statement_list(*, project: Project, insight, run: DiagnosisRun | None = None,
                           include_excluded: bool = False) -> QuerySet:
    """The statements the insight holds (at its level), e.g. to choose the ones to split off."""
    from diagnosis.models import Insight, InsightStatement

    field = "node_insight" if insight.level == Insight.Level.NODE else "system_insight"
    statements = InsightStatement.objects.filter(project=project, **{field: insight})
    if run is not None:
        statements = statements.filter(run=run)
    if not include_excluded:
        statements = statements.filter(excluded=False)
    return statements.select_related("trace").order_by("run_id", "trace_id", "feedback_id", "position")


@dataclass
class InsightTrend:
    by_release: list[dict]  # [{release, count, judged, frequency, run}], see diagnosis/insights/trend.py
    by_run: list[dict]  # [{run, run_name, release, created_at, count, traces, judged, frequency, lift}]


def insight_trend(*, project: Project, insight) -> InsightTrend:
    from diagnosis.insights.trend import trend_by_run

    insight = insight_get(project=project, insight_id=insight.pk)
    return InsightTrend(by_release=list(insight.trend or []), by_run=trend_by_run(insight=insight))


def insight_links(*, project: Project, insight) -> QuerySet:
    """Node-level insights a system insight contains, or system insights a node insight belongs to."""
    from diagnosis.models import Insight, InsightLink

    links = InsightLink.objects.filter(system__project=project)
    if insight.level == Insight.Level.SYSTEM:
        return links.filter(system=insight).select_related("node").order_by("-shared")
    return links.filter(node=insight).select_related("system").order_by("-shared")


def insight_link_pairs(*, project: Project, system_pks: list[int]) -> list[tuple[int, int]]:
    """(system insight pk, node insight pk) of every link of these system insights; one query."""
    from diagnosis.models import InsightLink

    return list(InsightLink.objects.filter(system__project=project, system_id__in=system_pks)
                .values_list("system_id", "node_id"))


# --- runs for CI: reuse and the latest run of a release ---------------------------------------------------------


def diagnosis_run_reusable(*, project: Project, release: str, judges: list[str] | None, model: str = "",
                           rubric_ids: list[int] | str = "all") -> DiagnosisRun | None:
    """A run a CI job can use instead of starting another: the newest queued, running or succeeded run over exactly
    `release` (no other filter, no sampling) with the same judge configuration (judges as resolved at creation,
    model, rubrics), whose insights did not fail to build. A succeeded run is only reused when no trace of the
    release was received after it was created (those traces would go unjudged)."""
    from diagnosis import conf
    from diagnosis.services.runs import judges_resolve
    from diagnosis.services.judging import LLM_JUDGES

    resolved_model = model or conf.judge_model()
    resolved = judges_resolve(judges=judges, model=resolved_model)
    stored_model = resolved_model if any(n in LLM_JUDGES for n in resolved) else model
    wanted_rubrics = "all" if rubric_ids == "all" else sorted(rubric_ids)
    candidates = (DiagnosisRun.objects
                  .filter(project=project, continuous=False, release=release, since=None, until=None, outcome="",
                          node="", sample_rate=1.0,
                          status__in=[DiagnosisRun.Status.QUEUED, DiagnosisRun.Status.RUNNING,
                                      DiagnosisRun.Status.SUCCEEDED])
                  .exclude(insights_status="failed").order_by("-created_at"))
    for run in candidates[:50]:
        if run.tags or run.trace_ids or run.judges != resolved or run.model != stored_model:
            continue
        if (run.rubric_ids if run.rubric_ids == "all" else sorted(run.rubric_ids or [])) != wanted_rubrics:
            continue
        if run.status == DiagnosisRun.Status.SUCCEEDED and Trace.objects.filter(
                project=project, release=release, last_received_at__gt=run.created_at).exists():
            continue
        return run
    return None


def diagnosis_run_latest_finished(*, project: Project, release: str) -> DiagnosisRun | None:
    """The newest run over `release` that judged all its traces (succeeded; continuous runs excluded)."""
    return (DiagnosisRun.objects
            .filter(project=project, continuous=False, release=release, status=DiagnosisRun.Status.SUCCEEDED)
            .order_by("-finished_at", "-created_at").first())


def insight_occurrences_of_run(*, project: Project, run: DiagnosisRun) -> QuerySet:
    """Each insight's figures in one run (one row per insight that occurred in it; "other" buckets left out)."""
    from diagnosis.models import InsightOccurrence

    return (InsightOccurrence.objects.filter(run=run, insight__project=project, insight__is_other=False)
            .select_related("insight"))
