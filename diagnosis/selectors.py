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
        dropped_evidence=run.dropped_evidence,
    )
