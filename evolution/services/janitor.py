"""The beat-scheduled janitor: jobs whose worker died, orphaned worktrees, consent that waited too long, lost sends,
target clones lost or never claimed."""

from __future__ import annotations

import logging
import shutil
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from evolution import git
from evolution.config import evolution_dir
from evolution.models import TERMINAL_STATES, EvolutionJob, JobState, StageRun
from evolution.services.jobs import JobStateError, evolution_job_fail, job_transition
from evolution.services.workspace import job_paths, mirror_path

logger = logging.getLogger(__name__)
S = JobState
# States a worker is busy in (QUEUED waits for one; AWAITING_CONSENT waits for a human).
WORKING_STATES = [s for s in JobState if s not in TERMINAL_STATES and s not in (S.QUEUED, S.AWAITING_CONSENT)]


def jobs_fail_stale(*, now=None) -> list[int]:
    """A heartbeat older than CLEAR_EVOLUTION_STALE_SECONDS means the worker running the stage is gone."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.CLEAR_EVOLUTION_STALE_SECONDS)
    failed = []
    for job in EvolutionJob.objects.filter(state__in=WORKING_STATES, heartbeat_at__lt=cutoff):
        StageRun.objects.filter(job=job, status=StageRun.Status.RUNNING).update(
            status=StageRun.Status.FAILED, outcome="WORKER_LOST", finished_at=now)
        age = int((now - job.heartbeat_at).total_seconds())
        error = f"No heartbeat for {age} s in {job.state}: the worker running it was lost"
        if job.state in (S.PROMOTING, S.HEALTH_CHECK, S.ROLLING_BACK) and job.config_snapshot.get("mode") == "hot_swap":
            from evolution.services.hot_swap import hot_swap_job_recover

            error += "; " + hot_swap_job_recover(job=job)
        if evolution_job_fail(job_id=job.pk, reason="worker_lost", actor="janitor", error=error):
            failed.append(job.pk)
    return failed


def jobs_resend_queued(*, now=None) -> list[int]:
    """A QUEUED job nobody claimed (its message was lost): send prepare again; the claim makes a duplicate harmless."""
    from evolution.services.stages import stage_enqueue

    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.CLEAR_EVOLUTION_STALE_SECONDS)
    ids = list(EvolutionJob.objects.filter(state=S.QUEUED, heartbeat_at__lt=cutoff).values_list("pk", flat=True))
    for job_id in ids:
        EvolutionJob.objects.filter(pk=job_id).update(heartbeat_at=now)
        stage_enqueue(job_id=job_id, stage="prepare")
    return ids


def consent_expire(*, now=None) -> list[int]:
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.CLEAR_EVOLUTION_CONSENT_TTL_HOURS)
    expired = []
    for job in EvolutionJob.objects.filter(state=S.AWAITING_CONSENT, heartbeat_at__lt=cutoff):
        try:
            job_transition(job_id=job.pk, from_states=[S.AWAITING_CONSENT], to_state=S.EXPIRED, actor="janitor",
                           event="consent_expired", terminal_reason="consent_expired")
            expired.append(job.pk)
        except JobStateError:
            continue
    return expired


def worktrees_prune() -> list[str]:
    """Job directories whose job has ended or no longer exists: remove the worktree and the files."""
    root = evolution_dir() / "jobs"
    if not root.is_dir():
        return []
    removed = []
    for directory in sorted(root.iterdir()):
        if not directory.name.isdigit():
            continue
        job = EvolutionJob.objects.filter(pk=int(directory.name)).only("state", "target_id").first()
        if job is not None and not job.is_terminal:
            continue
        worktree = job_paths(job_id=int(directory.name)).worktree
        if job is not None and mirror_path(target_id=job.target_id).exists():
            git.worktree_remove(mirror_path=mirror_path(target_id=job.target_id), worktree_path=worktree)
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory.name)
    repos = evolution_dir() / "repos"
    for mirror in sorted(repos.glob("*.git")) if repos.is_dir() else []:
        try:  # registrations of worktrees whose directory is gone
            git.worktree_remove(mirror_path=mirror, worktree_path=mirror / "__none__")
        except Exception:
            logger.exception("evolution: pruning %s failed", mirror)
    return removed


def janitor_run() -> dict:
    from evolution.services.rollbacks import rollbacks_janitor
    from evolution.services.target_cloning import target_clones_janitor

    return {"failed": jobs_fail_stale(), "resent": jobs_resend_queued(), "expired": consent_expire(),
            "pruned": worktrees_prune(), **rollbacks_janitor(), **target_clones_janitor()}
