"""A person's rollback of a hot-swap target, run by a Celery task instead of inside the request: the swap, the reload
and the health re-probe take up to the target's health window (90 s by default), which no page should wait for.

`release_rollback_request` checks what can be checked at once (hot swap configured, releases recorded, nothing
deploying, the release asked for staged), records a queued `ReleaseRollback` and sends `evolution.release_rollback`
after commit. The task claims the row with a conditional update (queued → running), so a redelivered message does
nothing; `release_rollback_run` then rolls back (hot_swap.release_rollback_to_previous) and records the outcome. A
partial unique index allows one queued or running rollback per target. The janitor fails a rollback whose worker
died (running past its deadline) and sends a queued one nobody claimed again.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from clear.errors import ClearError, ConflictError
from evolution.models import EvolutionJob, EvolutionTarget, ReleaseRollback

logger = logging.getLogger(__name__)
RB = ReleaseRollback.Status


def release_rollback_enqueue(*, rollback_id: int) -> None:
    from evolution.tasks import release_rollback

    release_rollback.apply_async(kwargs={"rollback_id": rollback_id})


def release_rollback_request(*, target: EvolutionTarget, user=None, to_release: str = "",
                             actor: str = "") -> ReleaseRollback:
    """Queue a rollback of `target` to `to_release` (blank: the most recent healthy release before the current
    one); 409 when a job is deploying to the target or another rollback of it is queued or running."""
    from evolution.deploy import release_current_get
    from evolution.services.hot_swap import HOT_SWAP_STATES, _plan, releases_root

    root = releases_root(target=target)
    _plan(config=target.config or {}, root=root)  # no hot_swap section: 400 naming it
    if not (root / "state.json").exists():
        raise ConflictError(f"Target {target.name!r} has no releases yet; nothing to roll back to",
                            code="no_rollback_target")
    busy = EvolutionJob.objects.filter(target=target, state__in=HOT_SWAP_STATES).first()
    if busy is not None:
        raise ConflictError(f"Job {busy.pk} is deploying to {target.name!r} ({busy.state}); roll back when it has "
                            "finished", code="deploy_busy", extra={"job": busy.pk})
    to_release = (to_release or "").strip()
    if to_release and not (root / "releases" / to_release).is_dir():
        raise ConflictError(f"Release {to_release!r} is not kept for {target.name!r}; choose one of the releases "
                            "listed", code="release_not_found")
    who = actor or (getattr(user, "email", "") if user is not None else "") or "system"
    try:
        with transaction.atomic():
            rollback = ReleaseRollback.objects.create(
                target=target, requested_by=user if getattr(user, "pk", None) else None, actor=who[:200],
                from_release=release_current_get(releases_root=root) or "", to_release=to_release)
            transaction.on_commit(lambda: release_rollback_enqueue(rollback_id=rollback.pk))
    except IntegrityError as exc:
        running = ReleaseRollback.objects.filter(target=target, status__in=ReleaseRollback.ACTIVE).first()
        raise ConflictError(f"{target.name!r} is already rolling back (rollback {running.pk if running else '?'}); "
                            "wait for it to finish", code="rollback_in_progress") from exc
    logger.info("evolution.rollback_requested target=%s rollback=%s to=%s by=%s", target.pk, rollback.pk,
                to_release or "-", who)
    return rollback


def _finish(rollback_id: int, **fields) -> None:
    ReleaseRollback.objects.filter(pk=rollback_id, status=RB.RUNNING).update(finished_at=timezone.now(), **fields)


def release_rollback_run(*, rollback_id: int) -> str:
    """Run a queued rollback once: claim it (queued → running, a conditional update), roll back, record."""
    from evolution.services.hot_swap import release_rollback_to_previous

    claimed = ReleaseRollback.objects.filter(pk=rollback_id, status=RB.QUEUED) \
        .update(status=RB.RUNNING, started_at=timezone.now())
    if not claimed:
        return f"rollback {rollback_id} is not queued (done, running elsewhere, or gone)"
    rollback = ReleaseRollback.objects.select_related("target", "requested_by").get(pk=rollback_id)
    try:
        result = release_rollback_to_previous(target=rollback.target, user=rollback.requested_by,
                                              to_release=rollback.to_release or None, actor=rollback.actor)
    except ClearError as exc:
        _finish(rollback_id, status=RB.FAILED, outcome="refused", detail=exc.message[:10000])
        return f"refused: {exc.message}"
    except Exception as exc:  # recorded for the page; the deploy library left `current` consistent
        logger.exception("evolution: rollback %s of target %s failed", rollback_id, rollback.target_id)
        _finish(rollback_id, status=RB.FAILED, outcome="error", detail=f"{type(exc).__name__}: {exc}"[:10000])
        return "error"
    outcome = str(result.outcome)
    healthy = outcome == "rolled_back"
    detail = (f"back on {result.active_release}, which passed its health check" if healthy else
              f"the rollback to {result.rollback_to or '?'} ended {outcome} ({result.reason}): {result.detail}")
    _finish(rollback_id, status=RB.SUCCEEDED if healthy else RB.FAILED, outcome=outcome,
            active_release=result.active_release or "", detail=detail[:10000], result=result.to_dict())
    return outcome


def rollbacks_janitor() -> dict:
    """Fail a running rollback past its deadline (its worker died: the row would stay running forever, since a
    redelivered message finds it claimed), and send a queued one nobody claimed again."""
    now = timezone.now()
    stale = timedelta(seconds=settings.CLEAR_EVOLUTION_STALE_SECONDS + 600)
    lost = ReleaseRollback.objects.filter(status=RB.RUNNING, started_at__lt=now - stale) \
        .update(status=RB.FAILED, outcome="worker_lost", finished_at=now,
                detail="the worker running this rollback stopped before it finished; check the release history "
                       "(`current`) and roll back again if needed")
    resent = 0
    for rollback_id in ReleaseRollback.objects.filter(status=RB.QUEUED, created_at__lt=now - timedelta(minutes=2)) \
            .values_list("pk", flat=True):
        release_rollback_enqueue(rollback_id=rollback_id)
        resent += 1
    return {"rollbacks_lost": lost, "rollbacks_resent": resent}
