"""A worker reads the repository of a target registered (or moved) through the API or the web UI: no web request
waits on a git host (issue 38). The request saves the target `cloning` with a new `state_version` and sends
`evolution.target_clone` after commit (services/targets.py).

The task claims the clone with a conditional update (still cloning, same version, not claimed), so a redelivered
message does nothing; it fetches the repository into a throwaway mirror under CLEAR_GIT_TIMEOUT_SECONDS, and for a
new target reads its evolution.json and confines the config exactly as registration did in the request before
(services/confinement.py). The outcome is stored only if no other clone was asked for since: `ready` with the config,
or `failed` with a reason in Clear's words (git_error_reason: never git's output, a path or a URL's credentials). The
janitor sends a clone nobody claimed again and fails one whose worker died.
"""

from __future__ import annotations

import logging
import tarfile
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from clear.errors import ClearError
from evolution.config import target_config_validate
from evolution.errors import GitError
from evolution.models import EvolutionTarget
from evolution.services.confinement import git_error_reason
from evolution.services.targets import config_confined, levels_confine, repository_read_confined

logger = logging.getLogger(__name__)
T = EvolutionTarget.State
UNCLAIMED_RESEND = timedelta(minutes=2)
# A clone task's time after its fetch (resolving the branch, exporting and parsing evolution.json) on a slow disk.
LOCAL_WORK_SECONDS = 300


def clone_time_limit() -> int:
    """The soft time limit of a clone task (evolution/tasks.py): the fetch's bound plus the local work after it."""
    return int(settings.CLEAR_GIT_TIMEOUT_SECONDS) + LOCAL_WORK_SECONDS


def _target_config(target: EvolutionTarget) -> dict | None:
    """The config to store once the repository is read: for a target that has none yet, its evolution.json held
    against what the client asked for; otherwise None (the stored one stays, only the fetch is checked)."""
    if target.config:
        repository_read_confined(source=target.source, ref=target.default_branch, config_file=False)
        return None
    repository = repository_read_confined(source=target.source, ref=target.default_branch)
    validated = target_config_validate(config_confined(config=target.config_requested, repository=repository))
    levels_confine(validated)
    return validated.model_dump(exclude_none=True)


def _failure_reason(exc: Exception) -> str:
    if isinstance(exc, ClearError) and not isinstance(exc, GitError):
        return exc.message  # Clear's own words: the field and what to change (confinement never names a path)
    if isinstance(exc, GitError):
        return f"source: could not read the repository ({git_error_reason(exc)})"
    if isinstance(exc, SoftTimeLimitExceeded):
        return "source: could not read the repository (it took too long)"
    if isinstance(exc, (tarfile.TarError, OSError)):
        return ("source: could not read the repository's evolution.json (its files could not be unpacked: a link "
                "leaving the repository, or a special file)")
    return "the repository could not be read (an error on the server; its log says more)"


def _outcome_store(*, target_id: int, version: int, **fields) -> bool:
    return bool(EvolutionTarget.objects.filter(pk=target_id, state=T.CLONING, state_version=version).update(
        state_changed_at=timezone.now(), clone_started_at=None, **fields))


def target_clone_run(*, target_id: int, version: int) -> str:
    """Read a cloning target's repository once: claim it, fetch it (and its evolution.json), store ready or failed."""
    claimed = EvolutionTarget.objects.filter(pk=target_id, state=T.CLONING, state_version=version,
                                             clone_started_at__isnull=True).update(clone_started_at=timezone.now())
    if not claimed:
        return f"target {target_id} version {version} is not waiting for a clone (done, running, superseded, gone)"
    try:
        target = EvolutionTarget.objects.get(pk=target_id)
        try:
            config = _target_config(target)
        except OperationalError:
            raise
        except Exception as exc:  # the target says why; the worker goes on
            if not isinstance(exc, ClearError):
                logger.exception("evolution: reading the repository of target %s failed", target_id)
            reason = _failure_reason(exc)
            stored = _outcome_store(target_id=target_id, version=version, state=T.FAILED, state_reason=reason)
            logger.info("evolution.target_clone_failed target=%s version=%s stored=%s reason=%s", target_id, version,
                        stored, reason)
            return f"failed: {reason}"
        fields = {"state": T.READY, "state_reason": ""}
        if config is not None:
            fields.update(config=config, config_requested=None)
        stored = _outcome_store(target_id=target_id, version=version, **fields)
    except OperationalError:
        # The database blinked: give the claim back so that the task's retry can take it.
        try:
            EvolutionTarget.objects.filter(pk=target_id, state_version=version).update(clone_started_at=None)
        except OperationalError:
            pass  # the janitor fails it once the claim is stale
        raise
    logger.info("evolution.target_clone_ready target=%s version=%s stored=%s", target_id, version, stored)
    return "ready" if stored else "superseded"


def target_clone_enqueue(*, target_id: int, version: int) -> None:
    from evolution.tasks import target_clone

    target_clone.apply_async(kwargs={"target_id": target_id, "version": version})


def target_clones_janitor(*, now=None) -> dict:
    """Fail a clone whose worker died (claimed past the task's time limit: a redelivered message finds it claimed),
    and send a clone nobody claimed again (its message was lost)."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=clone_time_limit() + 120)  # past the task's hard time limit: its worker is gone
    lost = EvolutionTarget.objects.filter(state=T.CLONING, clone_started_at__lt=stale).update(
        state=T.FAILED, state_changed_at=now, clone_started_at=None,
        state_reason="the worker reading the repository stopped before it finished; save the target to try again")
    waiting = EvolutionTarget.objects.filter(state=T.CLONING, clone_started_at__isnull=True,
                                             state_changed_at__lt=now - UNCLAIMED_RESEND)
    resent = 0
    for target_id, version in waiting.values_list("pk", "state_version"):
        target_clone_enqueue(target_id=target_id, version=version)
        resent += 1
    return {"targets_clone_lost": lost, "targets_clone_resent": resent}
