"""Celery entrypoints of evolution: one thin task per stage (load by id, run the stage service) and the janitor."""

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

STAGES = ("prepare", "baseline", "locate", "plan", "plan_review", "implement", "code_review", "check", "trials",
          "verdict", "promote")


def _stage_task(stage: str):
    def run(self, job_id: int, iteration: int = 0, round: int = 0) -> str:  # noqa: A002
        from evolution.services.stages import stage_execute

        try:
            return stage_execute(job_id=job_id, stage=stage, iteration=iteration, round=round)
        except OperationalError as exc:  # the database blinked; the stage dropped its claim and runs again
            raise self.retry(exc=exc, countdown=min(60, 5 * 2 ** self.request.retries)) from exc

    run.__name__ = run.__qualname__ = f"evolution_{stage}"
    # A stage may run a coding agent or a trial suite for far longer than CELERY_TASK_SOFT_TIME_LIMIT; its own
    # timeouts (role timeouts, trial limits) bound it, and this is the backstop.
    limit = settings.CLEAR_EVOLUTION_STAGE_TIME_LIMIT_SECONDS
    return shared_task(name=f"evolution.{stage}", bind=True, acks_late=True, reject_on_worker_lost=True,
                       ignore_result=True, max_retries=3, soft_time_limit=limit, time_limit=limit + 60)(run)


STAGE_TASKS = {stage: _stage_task(stage) for stage in STAGES}
globals().update({f"evolution_{stage}": task for stage, task in STAGE_TASKS.items()})


@shared_task(name="evolution.janitor", ignore_result=True)
def evolution_janitor() -> dict:
    from evolution.services.janitor import janitor_run

    return janitor_run()


@shared_task(name="evolution.insight_fixes_check", acks_late=True, ignore_result=True)
def evolution_insight_fixes_check(run_id: str) -> list:
    """A run's insights were built: check the promoted fixes still watched (closing the loop)."""
    from evolution.services.watch import insight_fixes_check

    return insight_fixes_check(run_id=run_id)
