"""Reads of the evolution app, always scoped to a project."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from django.db.models import QuerySet

from clear.errors import NotFoundError
from clear.projects.models import Project
from evolution.models import (
    TERMINAL_STATES, Artifact, AuditEvent, EvolutionJob, EvolutionTarget, Iteration, StageRun, TaskSpec, TrialRun,
    Verdict,
)


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


# --- the job page and the job detail API --------------------------------------------------------------------------

DOCUMENT_KINDS = ("diagnosis", "plan", "plan_review", "implementer", "code_review")


def evolution_target_by_id(*, project: Project, target_id) -> EvolutionTarget:
    try:
        target = EvolutionTarget.objects.filter(project=project, pk=int(target_id)).first()
    except (TypeError, ValueError):
        target = None
    if target is None:
        raise TargetNotFoundError(f"No evolution target {target_id} in this project")
    return target


def evolution_target_scripted_fixtures(*, target: EvolutionTarget) -> list[tuple[str, str]]:
    """(script path, label) of the scripted-backend scripts the target's config offers, in its order."""
    paths = (target.config or {}).get("scripted_fixtures") or []
    return [(path, f"{target.name}: {Path(path).stem}") for path in paths]


def evolution_job_stage_runs(*, project: Project, job: EvolutionJob) -> QuerySet[StageRun]:
    """The stage timeline: every stage execution in the order it started."""
    return StageRun.objects.filter(job__project=project, job=job).order_by("started_at", "pk")


def evolution_artifact_get(*, project: Project, job: EvolutionJob, artifact_id) -> Artifact:
    try:
        artifact = Artifact.objects.filter(job__project=project, job=job, pk=int(artifact_id)).first()
    except (TypeError, ValueError):
        artifact = None
    if artifact is None:
        raise NotFoundError(f"No artifact {artifact_id} in evolution job {job.pk}")
    return artifact


@dataclass
class IterationReview:
    """One iteration as a reviewer sees it: its verdict and gate table, the per-task baseline vs candidate
    scores, and the latest of each document (plan, reviews, patch) its stages wrote."""

    iteration: Iteration
    verdict: Verdict | None
    gates: list[dict]
    tasks: list[dict]
    artifacts: dict[str, Artifact] = field(default_factory=dict)  # kind -> the latest of that kind


def _mean(trials: list[dict]) -> float | None:
    return sum(t["score"] for t in trials) / len(trials) if trials else None


def evolution_job_review(*, project: Project, job: EvolutionJob) -> list[IterationReview]:
    """Every iteration of the job, oldest first, in a fixed number of queries whatever the number of iterations."""
    iterations = list(Iteration.objects.filter(job__project=project, job=job).select_related("verdict_record")
                      .order_by("n"))
    baseline: dict[int, list[dict]] = {}
    candidate: dict[tuple[int, int], list[dict]] = {}
    tasks = {task.pk: task for task in TaskSpec.objects.filter(job__project=project, job=job)
             .order_by("kind", "task_id", "seed")}
    for run in TrialRun.objects.filter(job__project=project, job=job).order_by("trial_n", "pk"):
        trial = {"trial": run.trial_n, "seed": run.seed, "score": run.score, "passed": run.passed,
                 "timed_out": run.timed_out, "error": run.error[:500]}
        if run.arm == TrialRun.Arm.BASELINE:
            baseline.setdefault(run.task_id, []).append(trial)
        else:
            candidate.setdefault((run.iteration_n, run.task_id), []).append(trial)
    latest: dict[tuple[int, str], Artifact] = {}
    for artifact in Artifact.objects.filter(job__project=project, job=job,
                                            kind__in=[*DOCUMENT_KINDS, "patch", "gate_report", "test_report"]) \
            .select_related("iteration").order_by("created_at", "pk"):
        if artifact.iteration is not None:
            latest[(artifact.iteration.n, artifact.kind)] = artifact
    reviews = []
    for it in iterations:
        rows = []
        for task_pk, task in tasks.items():
            base, cand = baseline.get(task_pk, []), candidate.get((it.n, task_pk), [])
            rows.append({"task_id": task.task_id, "seed": task.seed, "kind": task.kind, "trace_id": task.trace_id,
                         "reproduces": task.reproduces, "baseline": base, "candidate": cand,
                         "baseline_mean": _mean(base), "candidate_mean": _mean(cand),
                         "baseline_passes": sum(t["passed"] for t in base),
                         "candidate_passes": sum(t["passed"] for t in cand),
                         "delta": (_mean(cand) - _mean(base)) if cand and base else None})
        verdict = getattr(it, "verdict_record", None)
        reviews.append(IterationReview(
            iteration=it, verdict=verdict, gates=list((it.metrics or {}).get("gates", [])), tasks=rows,
            artifacts={kind: art for (n, kind), art in latest.items() if n == it.n}))
    return reviews


# --- hot-swap releases of a target (the release history page) ------------------------------------------------------

def evolution_target_releases_root(*, target: EvolutionTarget) -> Path:
    """Where a target's hot-swap releases live (evolution/deploy: releases/, current, state.json)."""
    from evolution.services.hot_swap import releases_root

    return releases_root(target=target)


@dataclass
class TargetReleases:
    root: Path
    hot_swap: bool  # the target's config has a hot_swap section
    state: object | None  # evolution.deploy.state.ReleaseState; None before the first release
    current: str | None
    error: str = ""


def evolution_target_releases(*, project: Project, target: EvolutionTarget) -> TargetReleases:
    """The target's release record as the deploy library keeps it on disk, newest swap first."""
    from evolution.deploy import release_current_get, release_state_get
    from evolution.errors import EvolutionError

    if target.project_id != project.pk:
        raise TargetNotFoundError(f"No evolution target {target.pk} in this project")
    root = evolution_target_releases_root(target=target)
    hot_swap = bool((target.config or {}).get("hot_swap"))
    if not (root / "state.json").exists():
        return TargetReleases(root=root, hot_swap=hot_swap, state=None, current=None)
    try:
        state = release_state_get(releases_root=root)
    except EvolutionError as exc:  # a corrupt state.json: say so on the page, the symlink still tells the truth
        return TargetReleases(root=root, hot_swap=hot_swap, state=None,
                              current=release_current_get(releases_root=root), error=exc.message)
    state.history = list(reversed(state.history))
    return TargetReleases(root=root, hot_swap=hot_swap, state=state, current=release_current_get(releases_root=root))
