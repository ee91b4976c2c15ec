"""The job state machine (evolution.md §7.3): one transition helper, start, cancel, consent, failure."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from clear.db import on_postgres
from clear.errors import ConflictError, NotFoundError
from evolution.config import job_policy_build, target_config_validate
from evolution.errors import EvolutionError
from evolution.facts import evolution_job_state_changed_publish
from evolution.models import (
    TERMINAL_STATES, AuditEvent, EvolutionJob, EvolutionTarget, Iteration, JobState, StageRun,
)

if TYPE_CHECKING:
    from evolution.backends import Preflight

logger = logging.getLogger(__name__)

S = JobState
ACTIVE_STATES = tuple(s for s in JobState if s not in TERMINAL_STATES)
# Allowed moves; FAILED and CANCELLED are reachable from every active state (errors, stop_requested).
TRANSITIONS: dict[str, set[str]] = {
    S.QUEUED: {S.PREPARING},
    S.PREPARING: {S.BASELINE},
    S.BASELINE: {S.LOCATING},
    S.LOCATING: {S.PLANNING, S.LOCATING, S.REJECTED},
    S.PLANNING: {S.PLAN_REVIEW, S.LOCATING, S.REJECTED},
    S.PLAN_REVIEW: {S.IMPLEMENTING, S.PLANNING, S.LOCATING, S.REJECTED},
    S.IMPLEMENTING: {S.CODE_REVIEW, S.IMPLEMENTING, S.LOCATING, S.REJECTED},
    S.CODE_REVIEW: {S.CHECKING, S.IMPLEMENTING, S.LOCATING, S.REJECTED},
    S.CHECKING: {S.TRIALS, S.IMPLEMENTING, S.LOCATING, S.REJECTED},
    S.TRIALS: {S.VERDICT},
    S.VERDICT: {S.AWAITING_CONSENT, S.LOCATING, S.REJECTED, S.NO_IMPROVEMENT},
    S.AWAITING_CONSENT: {S.PROMOTING, S.EXPIRED},
    S.PROMOTING: {S.PR_OPENED, S.HEALTH_CHECK},
    S.HEALTH_CHECK: {S.PROMOTED, S.ROLLING_BACK},
    S.ROLLING_BACK: {S.ROLLED_BACK},
    S.PROMOTED: {S.ROLLING_BACK},
}
for _state in ACTIVE_STATES:
    TRANSITIONS.setdefault(_state, set()).update({S.FAILED, S.CANCELLED})


class JobStateError(ConflictError):
    code = "job_wrong_state"


class JobNotFoundError(NotFoundError):
    pass


class TargetBusyError(ConflictError):
    code = "target_busy"


class TargetNotReadyError(ConflictError):
    code = "target_not_ready"


def target_ready_check(*, target: EvolutionTarget) -> None:
    """A job starts only on a target whose repository a worker has read: not while it is cloning, nor once that
    failed. Read afresh: the clone may have ended since the caller loaded the target."""
    state, reason = EvolutionTarget.objects.filter(pk=target.pk).values_list("state", "state_reason").first() \
        or (EvolutionTarget.State.READY, "")
    if state == EvolutionTarget.State.READY:
        return
    if state == EvolutionTarget.State.CLONING:
        message = (f"Target {target.name!r} is cloning: a worker is still reading its repository. Start the job once "
                   "the target is ready (its page and GET /api/v1/evolution/targets/{id}/ show its state)")
    else:
        message = (f"Target {target.name!r} is failed: {reason}. Correct its source, branch or config and save it: "
                   "a worker reads the repository again")
    raise TargetNotReadyError(message, extra={"state": state, "state_reason": reason})


def job_transition(*, job_id: int, from_states: Iterable[str], to_state: str, actor: str, event: str,
                   data: dict | None = None, keep_stage_id: int | None = None, **fields) -> EvolutionJob:
    """Move a job between states under its row lock; the audit event is written in the same transaction.
    `keep_stage_id`: the stage making the move, which its runner closes itself (not as failed with the job)."""
    from_states = {str(s) for s in from_states}
    with transaction.atomic():
        job = EvolutionJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            raise JobNotFoundError(f"No evolution job {job_id}")
        if job.state not in from_states:
            raise JobStateError(
                f"Job {job_id} is {job.state}, not {' or '.join(sorted(from_states))}; cannot go to {to_state}",
                extra={"state": job.state, "to_state": str(to_state)},
            )
        if str(to_state) not in TRANSITIONS.get(job.state, set()):
            raise JobStateError(f"Job {job_id}: {job.state} → {to_state} is not a transition of the state machine",
                                extra={"state": job.state, "to_state": str(to_state)})
        previous = job.state
        now = timezone.now()
        job.state = str(to_state)
        job.state_version += 1
        job.heartbeat_at = now
        for name, value in fields.items():
            setattr(job, name, value)
        if job.state in TERMINAL_STATES and job.finished_at is None:
            job.finished_at = now
        job.save()
        if job.state in TERMINAL_STATES:
            _open_work_close(job=job, now=now, keep_stage_id=keep_stage_id)
        AuditEvent.objects.create(job=job, actor=actor, event=event, from_state=previous, to_state=job.state,
                                  data={**(data or {}), "state_version": job.state_version})
        # Webhooks (and any other subscriber) are told after this transaction commits.
        evolution_job_state_changed_publish(
            job=job, from_state=previous, to_state=job.state, event=event,
            reason=str(fields.get("terminal_reason") or (data or {}).get("reason") or ""))
    if job.state in TERMINAL_STATES:
        transaction.on_commit(lambda: _cleanup_after_terminal(job.pk))
    return job


def _open_work_close(*, job: EvolutionJob, now, keep_stage_id: int | None) -> None:
    """An ended job has nothing running: its iteration and any stage still open (a worker that died, a cancel that
    won the race) are closed as failed with the job, in the move's transaction, so no reader sees "running" under a
    finished job. The stage that ends the job (keep_stage_id) is closed by stages.advance, with its own status."""
    reason = (job.terminal_reason or job.state.lower())[:60]
    Iteration.objects.filter(job=job, status=Iteration.Status.RUNNING).update(
        status=Iteration.Status.FAILED, failure_reason=reason)
    StageRun.objects.filter(job=job, status=StageRun.Status.RUNNING).exclude(pk=keep_stage_id).update(
        status=StageRun.Status.FAILED, finished_at=now, outcome=f"JOB_{job.state}"[:40])


def _cleanup_after_terminal(job_id: int) -> None:
    from evolution.services.workspace import job_workspace_remove

    try:
        job_workspace_remove(job_id=job_id)
    except Exception:  # the janitor removes what is left
        logger.exception("evolution: removing job %s's workspace failed", job_id)


def audit(*, job: EvolutionJob, actor: str, event: str, data: dict | None = None) -> AuditEvent:
    return AuditEvent.objects.create(job=job, actor=actor, event=event, from_state=job.state, to_state=job.state,
                                     data=data or {})


def job_backend_preflight(*, backend_name: str, backend_config: dict) -> Preflight | None:
    """The backend's readiness check (an evolution.backends.Preflight), for a caller to run before it opens the
    transaction that starts the job and to pass to evolution_job_start: the check may wait on the model server (an
    HTTP probe, a sandboxed `--version`), and no transaction is held while waiting on a model (issue 25). None when
    the backend cannot be built: evolution_job_start says why, in its own order of checks."""
    from evolution.backends import BackendError, backend_get

    try:
        return backend_get(name=backend_name, config=backend_config).preflight()
    except BackendError:
        return None


def evolution_job_start(*, project, target: EvolutionTarget, insight, backend_name: str, backend_config: dict,
                        depth: str = "standard", ticket=None, created_by=None, policy_overrides: dict | None = None,
                        enqueue: bool = True, preflight: Preflight | None = None) -> EvolutionJob:
    """Queue a job on a target for an insight; refuses a second active job on the same target. `preflight`: the
    backend's check, run by a caller that holds a transaction (job_backend_preflight); else it is run here."""
    from evolution.backends import backend_get

    if target.project_id != project.pk or insight.project_id != project.pk or (
            ticket is not None and ticket.project_id != project.pk):
        raise NotFoundError("The target, the insight and the ticket must belong to this project")
    target_ready_check(target=target)
    target_config = target_config_validate(target.config)
    policy = job_policy_build(depth=depth, target_config=target_config, overrides=policy_overrides)
    backend = backend_get(name=backend_name, config=backend_config)  # unknown name or bad config: BackendError
    if preflight is None:
        preflight = backend.preflight()
    if not preflight.ok:
        raise EvolutionError(f"Backend {backend_name!r} is not usable: {preflight.error}", code="backend_unavailable")
    snapshot = {"target": target_config.model_dump(), "policy": policy, "source": target.source,
                "default_branch": target.default_branch, "push_url": target.push_url or target.source}
    actor = f"user:{created_by.pk}" if created_by else "system"
    try:
        with transaction.atomic():
            if on_postgres(connection):  # serialises concurrent starts on one target (§7.2)
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [7310, target.pk])
            _target_idle_check(target=target)
            job = EvolutionJob.objects.create(
                project=project, target=target, insight=insight, ticket=ticket, depth=depth,
                backend_name=backend_name, backend_config=backend_config, created_by=created_by,
                config_snapshot=snapshot, heartbeat_at=timezone.now(),
            )
            AuditEvent.objects.create(job=job, actor=actor, event="created", to_state=job.state,
                                      data={"insight": insight.pk, "backend": backend_name, "depth": depth,
                                            "backend_version": preflight.version})
    except IntegrityError:  # the partial unique index caught a concurrent start the lock did not (SQLite)
        _target_idle_check(target=target)
        raise
    if enqueue:
        from evolution.services.stages import stage_enqueue

        transaction.on_commit(lambda: stage_enqueue(job_id=job.pk, stage="prepare"))
    return job


def _target_idle_check(*, target: EvolutionTarget) -> None:
    active = EvolutionJob.objects.filter(target=target).exclude(state__in=TERMINAL_STATES).first()
    if active is not None:
        raise TargetBusyError(f"Target {target.name!r} already has an active job ({active.pk}); wait for it to "
                              "finish or cancel it", extra={"job": active.pk})


def evolution_job_cancel(*, job: EvolutionJob, actor: str = "system") -> EvolutionJob:
    """Ask a running job to stop; it ends CANCELLED at its next boundary (a running sandbox process is killed).
    A job waiting for consent or still queued is cancelled at once."""
    with transaction.atomic():
        locked = EvolutionJob.objects.select_for_update().get(pk=job.pk)
        if locked.is_terminal:
            raise JobStateError(f"Job {job.pk} already ended ({locked.state})", extra={"state": locked.state})
        locked.stop_requested = True
        locked.save(update_fields=["stop_requested", "updated_at"])
        audit(job=locked, actor=actor, event="stop_requested")
    if locked.state in (S.QUEUED, S.AWAITING_CONSENT):
        return job_transition(job_id=job.pk, from_states=[locked.state], to_state=S.CANCELLED, actor=actor,
                              event="cancelled", terminal_reason="cancelled")
    return locked


def evolution_job_fail(*, job_id: int, reason: str, error: str = "", actor: str = "system") -> EvolutionJob | None:
    """End a job FAILED(reason) from whatever active state it is in; a job already ended is left alone."""
    job = EvolutionJob.objects.filter(pk=job_id).first()
    if job is None or job.is_terminal:
        return job
    try:
        return job_transition(job_id=job_id, from_states=ACTIVE_STATES, to_state=S.FAILED, actor=actor,
                              event="failed", data={"reason": reason, "error": error[:2000]},
                              terminal_reason=reason, error=error[:10000])
    except JobStateError:  # it ended meanwhile
        return EvolutionJob.objects.get(pk=job_id)


def evolution_job_consent(*, job: EvolutionJob, user, patch_sha256: str) -> EvolutionJob:
    """A human approves the best candidate: records who and which patch (its sha256), then promotes it."""
    best = job.best_iteration
    if job.state != S.AWAITING_CONSENT or best is None:
        raise JobStateError(f"Job {job.pk} is {job.state}; only a job awaiting consent can be approved",
                            extra={"state": job.state})
    if patch_sha256 != best.patch_sha256:
        raise ConflictError(
            f"The approved patch hash {patch_sha256[:12]}… is not the candidate's ({best.patch_sha256[:12]}…); "
            "review the current diff and approve again", code="patch_changed")
    if job.config_snapshot.get("mode") == "hot_swap":
        from evolution.services.hot_swap import hot_swap_consent_check

        hot_swap_consent_check(job=job)  # its base must still be live, and no rollback running
    job = job_transition(job_id=job.pk, from_states=[S.AWAITING_CONSENT], to_state=S.PROMOTING,
                         actor=f"user:{user.pk}", event="consented",
                         data={"patch_sha256": patch_sha256, "iteration": best.n},
                         consent_by=user, consent_at=timezone.now(), consent_patch_sha256=patch_sha256)
    from evolution.services.stages import stage_enqueue

    transaction.on_commit(lambda: stage_enqueue(job_id=job.pk, stage="promote"))
    return job


def evolution_job_discard(*, job: EvolutionJob, user) -> EvolutionJob:
    return job_transition(job_id=job.pk, from_states=[S.AWAITING_CONSENT], to_state=S.CANCELLED,
                          actor=f"user:{user.pk}", event="discarded", terminal_reason="discarded")
