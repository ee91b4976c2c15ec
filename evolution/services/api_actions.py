"""What the REST API and the pages do on top of the orchestrator's services (evolution/services/jobs.py, targets.py):
the promotion mode of a new job, starting a job again from the live release, and registering a target without
waiting for its repository (a worker reads it). Approving and discarding are a person's (evolution_job_consent,
evolution_job_discard): no project key reaches them (evolution/apis/jobs.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from clear.errors import ClearError, ConflictError
from evolution.errors import EvolutionConfigInvalid, GitError
from evolution.models import EvolutionJob, EvolutionTarget, JobState
from evolution.services.confinement import script_path_check
from evolution.services.jobs import (
    _target_idle_check, audit, evolution_job_discard, evolution_job_start, job_backend_preflight, target_ready_check,
)
from evolution.services.targets import evolution_target_add

if TYPE_CHECKING:
    from evolution.backends import Preflight

MODES = ("pr", "hot_swap")


def evolution_target_register(*, project, name: str, source: str, config: dict | None = None,
                              default_branch: str = "", push_url: str = "", created_by=None) -> EvolutionTarget:
    """Add a target for an API or web user, confined (services/confinement.py), and answer at once: the target is
    `cloning` until a worker has read the repository's evolution.json (services/target_cloning.py). Without
    `config` that file is the config; with one it gives the commands and sandbox levels, which `config` may repeat
    but not change. A bad name, source or config field is a 400 now; what only the repository can tell (no such
    repository or branch, no evolution.json, other commands) ends the target `failed` with the reason."""
    return evolution_target_add(project=project, name=name, source=source, config=config,
                                default_branch=default_branch, push_url=push_url, created_by=created_by,
                                operator=False)


def backend_config_confine(*, target: EvolutionTarget, backend_name: str, backend_config: dict) -> None:
    """What an API or web user may put in a backend config (the operator's `manage.py evolution_job` is not
    checked): a scripted job's script file is one the operator listed for the target, an API key variable is
    one of CLEAR_EVOLUTION_BACKEND_ENV_ALLOW (the backends check that again when they are built), and the model
    endpoint is one the operator allows (https, one of CLEAR_EVOLUTION_MODEL_HOSTS, a public address: key_env.py),
    checked again before each role unless the operator started the job (services/roles.py)."""
    from evolution.backends.key_env import api_key_env_check, backend_model_check

    if not isinstance(backend_config, dict):
        return  # backend_get says what it must be
    if backend_name == "scripted":
        script_path_check(target=target, backend_config=backend_config)
    elif backend_name in ("external", "litellm"):
        api_key_env_check(name=backend_config.get("api_key_env"), backend=backend_name)
        backend_model_check(backend=backend_name, config=backend_config)


def job_mode(job: EvolutionJob) -> str:
    return job.config_snapshot.get("mode", "pr")


class FixExistsError(ConflictError):
    code = "insight_fix_exists"


def evolution_job_create(*, project, target: EvolutionTarget, insight, backend_name: str, backend_config: dict,
                         depth: str = "standard", mode: str = "pr", ticket=None, created_by=None,
                         confirm: bool = False, preflight: Preflight | None = None) -> EvolutionJob:
    """Start a job and record how its approved candidate is promoted: `pr` (a branch pushed for review) or
    `hot_swap` (a release swapped in with a health check, which needs the target's `hot_swap` config section).

    A hot-swap job starts from the target's live release (release zero until a job is promoted), recorded as its
    `base_release`; a PR job from the target branch's head. An insight that already has a live or pending fix
    (`evolution_insight_fix_note`) needs `confirm=True`: 409 insight_fix_exists otherwise, naming the fix."""
    from evolution.selectors import evolution_insight_fix_note

    target_ready_check(target=target)  # 409 first: a target still cloning has no config to check the rest against
    if mode not in MODES:
        raise EvolutionConfigInvalid(f"mode: {mode!r} is not one of {', '.join(MODES)}",
                                     extra={"fields": {"mode": f"one of {', '.join(MODES)}"}})
    if mode == "hot_swap" and not (target.config or {}).get("hot_swap"):
        raise EvolutionConfigInvalid(
            f"mode: target {target.name!r} has no hot_swap section in its config (activator, probes; see "
            "evolution/deploy/README.md); add one or use mode pr",
            extra={"fields": {"mode": "the target has no hot_swap config"}})
    backend_config_confine(target=target, backend_name=backend_name, backend_config=backend_config)
    if not confirm:
        _target_idle_check(target=target)  # a busy target is the first thing to say
        note = evolution_insight_fix_note(project=project, insight=insight)
        if note is not None:
            raise FixExistsError(
                f"{note.text} Start another job on insight {insight.pk} anyway? Confirm it (the form's checkbox, or "
                "`confirm: true`).", extra={"fields": {"confirm": "this insight already has a fix; confirm to go on"},
                                            "fix": note.to_dict()})
    base = None
    if mode == "hot_swap":
        from evolution.services.hot_swap import job_base_release

        try:
            base = job_base_release(target=target)
        except (GitError, ClearError) as exc:
            raise EvolutionConfigInvalid(f"The live release of {target.name!r} cannot be recorded: {exc.message}",
                                         extra={"fields": {"mode": exc.message}}) from exc
    if preflight is None:  # before the transaction: the check may wait on the model server
        preflight = job_backend_preflight(backend_name=backend_name, backend_config=backend_config)
    with transaction.atomic():
        # The first stage is sent on commit, so the mode and the base are set before any stage reads them.
        job = evolution_job_start(project=project, target=target, insight=insight, backend_name=backend_name,
                                  backend_config=backend_config, depth=depth, ticket=ticket, created_by=created_by,
                                  preflight=preflight)
        job.config_snapshot = {**job.config_snapshot, "mode": mode}
        fields = ["config_snapshot", "updated_at"]
        if base is not None and base.commit:
            job.base_release, job.base_commit = base, base.commit
            fields += ["base_release", "base_commit"]
            audit(job=job, actor="system", event="based_on_release",
                  data={"release_id": base.release_id, "commit": base.commit})
        job.save(update_fields=fields)
    return job


def evolution_job_restart(*, job: EvolutionJob, user) -> EvolutionJob:
    """Start again from the live release: discard the candidate of a job awaiting consent (or take an ended job)
    and start the same job (insight, ticket, target, backend, depth, mode) on what is live now."""
    # Before the transaction: the backend's check may wait on the model server.
    preflight = job_backend_preflight(backend_name=job.backend_name, backend_config=job.backend_config)
    with transaction.atomic():
        if job.state == JobState.AWAITING_CONSENT:
            evolution_job_discard(job=job, user=user)
        elif not job.is_terminal:
            raise ConflictError(f"Job {job.pk} is still running ({job.state}); start again once it has ended",
                                code="job_wrong_state")
        new = evolution_job_create(
            project=job.project, target=job.target, insight=job.insight, ticket=job.ticket,
            backend_name=job.backend_name, backend_config=job.backend_config, depth=job.depth, mode=job_mode(job),
            created_by=user, confirm=True, preflight=preflight)
        audit(job=new, actor=f"user:{user.pk}", event="restarted_from", data={"job": job.pk})
    return new


def evolution_target_delete(*, target: EvolutionTarget) -> None:
    """Remove a target that never ran a job; a target with jobs keeps them (and their audit trail) reachable."""
    if target.jobs.exists():
        raise ConflictError(f"Target {target.name!r} has {target.jobs.count()} job(s); it is kept with their history. "
                            "Edit its config instead", code="target_has_jobs")
    target.delete()

