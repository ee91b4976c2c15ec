"""Celery entrypoints of evolution: one thin task runs any stage of a job (load by id, run the stage service), plus
a person's release rollback, the clone of a target registered through the API or the web UI, and the janitor."""

from celery import current_app, shared_task
from django.conf import settings
from django.db import OperationalError

from evolution.services.target_cloning import clone_time_limit

# A stage may run a coding agent or a trial suite for far longer than CELERY_TASK_SOFT_TIME_LIMIT; its own timeouts
# (role timeouts, trial limits) bound it, and this is the backstop.
STAGE_TIME_LIMIT = settings.CLEAR_EVOLUTION_STAGE_TIME_LIMIT_SECONDS
CLONE_TIME_LIMIT = clone_time_limit()


@shared_task(name="evolution.run_stage", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=3, soft_time_limit=STAGE_TIME_LIMIT, time_limit=STAGE_TIME_LIMIT + 60)
def run_stage(self, job_id: int, stage: str, iteration: int = 0, round: int = 0) -> str:  # noqa: A002
    """Run one stage of a job; the stage service claims it (a conditional state move, a unique StageRun row), so a
    duplicate or stale delivery does nothing."""
    from evolution.services.stages import STAGE_STATES, stage_execute

    if stage not in STAGE_STATES:
        return f"unknown stage {stage!r}"
    try:
        return stage_execute(job_id=job_id, stage=stage, iteration=iteration, round=round)
    except OperationalError as exc:  # the database blinked; the stage dropped its claim and runs again
        raise self.retry(exc=exc, countdown=min(60, 5 * 2 ** self.request.retries)) from exc


# Until run_stage, each stage had its own task, "evolution.<stage>". Messages still queued under those names reach
# this task (the names are aliases of it in the registry) and are sent on as run_stage. Remove once no worker or
# queue predates run_stage. (The worker's log names every alias after the last one registered, evolution.promote.)
LEGACY_STAGE_TASK_NAMES = tuple(f"evolution.{stage}" for stage in (
    "prepare", "baseline", "locate", "plan", "plan_review", "implement", "code_review", "check", "trials", "verdict",
    "promote"))


@shared_task(name="evolution.legacy_stage", bind=True, acks_late=True, ignore_result=True)
def legacy_stage(self, job_id: int, iteration: int = 0, round: int = 0) -> str:  # noqa: A002
    stage = (self.request.task or "").removeprefix("evolution.")
    if f"evolution.{stage}" not in LEGACY_STAGE_TASK_NAMES:
        return f"unknown stage {stage!r}"
    run_stage.apply_async(kwargs={"job_id": job_id, "stage": stage, "iteration": iteration, "round": round})
    return f"sent on as run_stage: job {job_id} stage {stage}"


for _name in LEGACY_STAGE_TASK_NAMES:
    current_app.tasks[_name] = current_app.tasks[legacy_stage.name]


@shared_task(name="evolution.release_rollback", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, max_retries=3, soft_time_limit=STAGE_TIME_LIMIT, time_limit=STAGE_TIME_LIMIT + 60)
def release_rollback(self, rollback_id: int) -> str:
    """Run a person's rollback of a hot-swap target (swap, reload, re-probe); the service claims the queued row with
    a conditional update, so a duplicate delivery does nothing."""
    from evolution.services.rollbacks import release_rollback_run

    try:
        return release_rollback_run(rollback_id=rollback_id)
    except OperationalError as exc:  # the database blinked before the claim; nothing was swapped
        raise self.retry(exc=exc, countdown=min(60, 5 * 2 ** self.request.retries)) from exc


@shared_task(name="evolution.target_clone", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=3, soft_time_limit=CLONE_TIME_LIMIT, time_limit=CLONE_TIME_LIMIT + 60)
def target_clone(self, target_id: int, version: int) -> str:
    """Read a cloning target's repository (a clone or fetch under CLEAR_GIT_TIMEOUT_SECONDS) and mark it ready or
    failed; the service claims it with a conditional update, so a duplicate delivery does nothing."""
    from evolution.services.target_cloning import target_clone_run

    try:
        return target_clone_run(target_id=target_id, version=version)
    except OperationalError as exc:  # the database blinked; the service gave its claim back
        raise self.retry(exc=exc, countdown=min(60, 5 * 2 ** self.request.retries)) from exc


@shared_task(name="evolution.janitor", ignore_result=True)
def evolution_janitor() -> dict:
    from evolution.services.janitor import janitor_run

    return janitor_run()
