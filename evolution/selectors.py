"""Reads of the evolution app, always scoped to a project."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from django.db.models import Exists, OuterRef, Q, QuerySet

from clear.db import row_by_id
from clear.errors import NotFoundError
from clear.projects.models import Project
from evolution.models import (
    TERMINAL_STATES, Artifact, AuditEvent, EvolutionJob, EvolutionTarget, InsightFix, Iteration, Release,
    ReleaseRollback, StageRun, TaskSpec, TrialRun, Verdict,
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
    # release_rolled_back: the release the job promoted was rolled back since (its fix is no longer live).
    jobs = EvolutionJob.objects.filter(project=project).select_related(
        "target", "insight", "best_iteration", "base_release").annotate(release_rolled_back=Exists(
            Release.objects.filter(job=OuterRef("pk"), status=Release.Status.ROLLED_BACK)))
    if target is not None:
        jobs = jobs.filter(target=target)
    if active is True:
        jobs = jobs.exclude(state__in=TERMINAL_STATES)
    elif active is False:
        jobs = jobs.filter(state__in=TERMINAL_STATES)
    return jobs.order_by("-created_at", "-pk")


def evolution_job_get(*, project: Project, job_id) -> EvolutionJob:
    job = row_by_id(evolution_job_list(project=project), job_id)
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
    target = row_by_id(EvolutionTarget.objects.filter(project=project), target_id)
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
    artifact = row_by_id(Artifact.objects.filter(job__project=project, job=job), artifact_id)
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
    rollback: ReleaseRollback | None = None  # the latest rollback asked for (its live status on the page)
    rows: dict = field(default_factory=dict)  # release_id -> Release row (the job that promoted it, its status)


def evolution_target_releases(*, project: Project, target: EvolutionTarget) -> TargetReleases:
    """The target's release record as the deploy library keeps it on disk, newest swap first."""
    from evolution.deploy import release_current_get, release_state_get
    from evolution.errors import EvolutionError

    if target.project_id != project.pk:
        raise TargetNotFoundError(f"No evolution target {target.pk} in this project")
    root = evolution_target_releases_root(target=target)
    hot_swap = bool((target.config or {}).get("hot_swap"))
    extra = {"rollback": evolution_target_rollback_latest(target=target),
             "rows": {r.release_id: r for r in Release.objects.filter(target=target).select_related("job")}}
    if not (root / "state.json").exists():
        return TargetReleases(root=root, hot_swap=hot_swap, state=None, current=None, **extra)
    try:
        state = release_state_get(releases_root=root)
    except EvolutionError as exc:  # a corrupt state.json: say so on the page, the symlink still tells the truth
        return TargetReleases(root=root, hot_swap=hot_swap, state=None,
                              current=release_current_get(releases_root=root), error=exc.message, **extra)
    state.history = list(reversed(state.history))
    return TargetReleases(root=root, hot_swap=hot_swap, state=state, current=release_current_get(releases_root=root),
                          **extra)


def evolution_target_rollback_latest(*, target: EvolutionTarget) -> ReleaseRollback | None:
    return ReleaseRollback.objects.filter(target=target).order_by("-created_at", "-pk").first()


def evolution_rollback_get(*, project: Project, target: EvolutionTarget, rollback_id) -> ReleaseRollback:
    rollback = row_by_id(ReleaseRollback.objects.filter(target__project=project, target=target), rollback_id)
    if rollback is None:
        raise NotFoundError(f"No rollback {rollback_id} of target {target.pk} in this project")
    return rollback


def rollback_status_data(rollback: ReleaseRollback) -> dict:
    """The small status the releases page polls (and the API answers)."""
    return {"id": rollback.pk, "target": rollback.target_id, "status": rollback.status, "state": rollback.status,
            "done": rollback.is_done,
            "state_version": rollback.status,  # what the page's poller compares: it reloads when this moves
            "from_release": rollback.from_release, "to_release": rollback.to_release or None,
            "outcome": rollback.outcome, "active_release": rollback.active_release or None,
            "detail": rollback.detail, "actor": rollback.actor,
            "created_at": rollback.created_at.isoformat() if rollback.created_at else None,
            "started_at": rollback.started_at.isoformat() if rollback.started_at else None,
            "finished_at": rollback.finished_at.isoformat() if rollback.finished_at else None}

# --- what a job started from, and whether what it promoted is still live --------------------------------------------

@dataclass
class JobBase:
    """What a job was built on: a hot-swap job's base release (the live one when it started) and whether it still
    is; `rolled_back` when the release the job promoted was rolled back since."""

    release: Release | None
    live: Release | None
    commit: str
    stale: bool  # a hot-swap job still awaiting consent whose base release is no longer live
    rolled_back: bool
    promoted_release: Release | None

    @property
    def label(self) -> str:
        if self.release is not None:
            return f"based on release {self.release.release_id}"
        return f"based on commit {self.commit[:12]}" if self.commit else ""


def evolution_job_base(*, project: Project, job: EvolutionJob) -> JobBase:
    """The job page's "based on release X" line, its stale-base warning and its "release rolled back" flag."""
    release = job.base_release if job.base_release_id and job.project_id == project.pk else None
    live = None
    if job.state == "AWAITING_CONSENT" and release is not None:
        from evolution.services.hot_swap import live_release

        live = live_release(target=job.target)
    promoted = Release.objects.filter(target_id=job.target_id, job=job).order_by("-pk").first()
    return JobBase(release=release, live=live, commit=job.base_commit,
                   stale=release is not None and job.state == "AWAITING_CONSENT" and (
                       live is None or live.pk != release.pk),
                   rolled_back=promoted is not None and promoted.status == Release.Status.ROLLED_BACK
                   and job.state == "PROMOTED", promoted_release=promoted)


# --- an insight's live or pending fix (the insight page, the Evolve form, the API's confirm) ------------------------

@dataclass
class InsightFixNote:
    kind: str  # "live": a promoted or merged fix is watched; "pending": a job on it runs, waits, or its PR is open
    job: EvolutionJob
    text: str
    since: object | None = None
    release: str = ""
    judged: int | None = None
    status: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "job": self.job.pk, "text": self.text, "release": self.release,
                "since": self.since.isoformat() if self.since else None, "judged": self.judged,
                "status": self.status}


def evolution_insight_fix_rolled_back(*, project: Project, insight) -> InsightFixNote | None:
    """The insight's latest fix that was promoted and then rolled back, for its page to say so when no fix is live
    or on its way (the job page says it; the insight page forgot it once the fix stopped being live)."""
    fix = (InsightFix.objects.filter(project=project, insight=insight, status=InsightFix.Status.ROLLED_BACK)
           .select_related("job").order_by("-updated_at", "-pk").first())
    if fix is None:
        return None
    promoted = fix.promoted_at.strftime("%Y-%m-%d %H:%M UTC") if fix.promoted_at else "?"
    text = (f"A fix was promoted on {promoted} (job {fix.job_id}, release {fix.release}) and rolled back on "
            f"{fix.updated_at:%Y-%m-%d %H:%M UTC}: it is not live.")
    return InsightFixNote(kind="rolled_back", job=fix.job, text=text, since=fix.promoted_at, release=fix.release,
                          status=fix.status)


def evolution_insight_fix_note(*, project: Project, insight) -> InsightFixNote | None:
    """The insight's fix that is live (a promoted release, or a merged PR, still watched or confirmed fixed, not
    rolled back), else one on its way (a job running or awaiting a decision, a PR not marked merged yet)."""
    fix = (InsightFix.objects.filter(project=project, insight=insight,
                                     status__in=[InsightFix.Status.WATCHING, InsightFix.Status.FIXED])
           .select_related("job").order_by("-promoted_at", "-pk").first())
    if fix is not None:
        judged = (fix.evidence or {}).get("judged")
        judged = judged if isinstance(judged, int) else 0
        since = fix.promoted_at.strftime("%Y-%m-%d %H:%M UTC") if fix.promoted_at else "?"
        text = (f"Fix live since {since} (job {fix.job_id}, release {fix.release}): "
                + ("the insight was marked fixed" if fix.status == InsightFix.Status.FIXED else
                   f"watching {judged} judged trace{'s' if judged != 1 else ''} of it so far") + ".")
        return InsightFixNote(kind="live", job=fix.job, text=text, since=fix.promoted_at, release=fix.release,
                              judged=judged, status=fix.status)
    job = (EvolutionJob.objects.filter(project=project, insight=insight)
           .filter(~Q(state__in=[s.value for s in TERMINAL_STATES]) | Q(state="PR_OPENED", fix__isnull=True))
           .order_by("-created_at", "-pk").first())
    if job is None:
        return None
    if job.state == "PR_OPENED":
        text = f"Fix pending: job {job.pk}'s branch {job.pr_branch} is pushed for review and not marked merged yet."
    elif job.state == "AWAITING_CONSENT":
        text = f"Fix pending: job {job.pk} has a candidate awaiting a decision."
    else:
        text = f"Fix pending: job {job.pk} is working on it ({job.state})."
    return InsightFixNote(kind="pending", job=job, text=text, since=job.created_at, status=job.state)
