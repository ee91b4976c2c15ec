"""Reads of the evolution app, always scoped to a project."""

from __future__ import annotations

from django.db.models import QuerySet

from clear.errors import NotFoundError
from clear.projects.models import Project
from evolution.models import TERMINAL_STATES, Artifact, AuditEvent, EvolutionJob, EvolutionTarget, TrialRun


class TargetNotFoundError(NotFoundError):
    pass


def evolution_target_list(*, project: Project) -> QuerySet[EvolutionTarget]:
    return EvolutionTarget.objects.filter(project=project).order_by("name")


def evolution_target_get(*, project: Project, name_or_id) -> EvolutionTarget:
    targets = EvolutionTarget.objects.filter(project=project)
    target = targets.filter(name=str(name_or_id)).first()
    if target is None and str(name_or_id).isdigit():
        target = targets.filter(pk=int(name_or_id)).first()
    if target is None:
        raise TargetNotFoundError(f"No evolution target {name_or_id!r} in this project; add one with "
                                  "`manage.py evolution_target add`")
    return target


def evolution_job_list(*, project: Project, target: EvolutionTarget | None = None,
                       active: bool | None = None) -> QuerySet[EvolutionJob]:
    jobs = EvolutionJob.objects.filter(project=project).select_related("target", "insight", "best_iteration")
    if target is not None:
        jobs = jobs.filter(target=target)
    if active is True:
        jobs = jobs.exclude(state__in=TERMINAL_STATES)
    elif active is False:
        jobs = jobs.filter(state__in=TERMINAL_STATES)
    return jobs.order_by("-created_at", "-pk")


def evolution_job_get(*, project: Project, job_id) -> EvolutionJob:
    try:
        job = evolution_job_list(project=project).filter(pk=int(job_id)).first()
    except (TypeError, ValueError):
        job = None
    if job is None:
        raise NotFoundError(f"No evolution job {job_id} in this project")
    return job


def evolution_job_events(*, project: Project, job: EvolutionJob) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(job__project=project, job=job).order_by("ts", "pk")


def evolution_job_artifacts(*, project: Project, job: EvolutionJob, kind: str | None = None) -> QuerySet[Artifact]:
    artifacts = Artifact.objects.filter(job__project=project, job=job)
    if kind:
        artifacts = artifacts.filter(kind=kind)
    return artifacts.select_related("iteration").order_by("created_at", "pk")


def evolution_job_matrix(*, project: Project, job: EvolutionJob, iteration_n: int) -> list[dict]:
    """Per task: baseline and candidate (score, passed) by trial index, for the baseline-vs-candidate table."""
    rows: dict[int, dict] = {}
    runs = TrialRun.objects.filter(job__project=project, job=job, iteration_n__in=[0, iteration_n]) \
        .select_related("task").order_by("task__kind", "task__task_id", "trial_n")
    for run in runs:
        row = rows.setdefault(run.task_id, {"task_id": run.task.task_id, "seed": run.task.seed, "kind": run.task.kind,
                                            "baseline": [], "candidate": []})
        row[run.arm].append({"score": run.score, "passed": run.passed, "timed_out": run.timed_out})
    return list(rows.values())
