"""Running one stage of a job: the claim, the expected-state check, the outcome, the next stage enqueued on commit.

The one stage task, evolution.run_stage, calls `stage_execute`, which dispatches through the stage tables
(STAGE_STATES here, HANDLERS in stages_agent.py for roles and gates, in stages_eval.py for prepare, baseline,
trials, verdict, promote).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid

from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from clear.errors import ClearError
from evolution.models import EvolutionJob, Iteration, JobState, StageRun
from evolution.services.jobs import JobStateError, evolution_job_fail, job_transition
from evolution.services.trials import StopRequested
from evolution.services.workspace import Heartbeat

logger = logging.getLogger(__name__)
S = JobState

# The state a stage runs in (prepare claims the job by moving it QUEUED → PREPARING).
STAGE_STATES = {
    "prepare": S.PREPARING, "baseline": S.BASELINE, "locate": S.LOCATING, "plan": S.PLANNING,
    "plan_review": S.PLAN_REVIEW, "implement": S.IMPLEMENTING, "code_review": S.CODE_REVIEW, "check": S.CHECKING,
    "trials": S.TRIALS, "verdict": S.VERDICT, "promote": S.PROMOTING,
}
STATE_STAGES = {state: stage for stage, state in STAGE_STATES.items()}
ACTOR = "orchestrator"
ROLE_STAGES = ("locate", "plan", "plan_review", "implement", "code_review")
SANDBOX_STAGES = ("baseline", "check", "trials")  # prepare records the level it chose itself

_eager = threading.local()
# The stage run whose handler is executing: a state change it makes closes it in the same transaction, so that no
# reader sees the job in its next state while the stage that moved it still says "running".
_running_stage = contextvars.ContextVar("running_stage", default=None)


def stage_enqueue(*, job_id: int, stage: str, iteration: int = 0, round: int = 0) -> None:  # noqa: A002
    """Send the stage to evolution.run_stage. Under eager Celery (tests, `--inline`) stages run one after another
    from a queue instead of nesting inside each other's commit hooks."""
    from celery import current_app

    from evolution.tasks import run_stage

    kwargs = {"job_id": job_id, "stage": stage, "iteration": iteration, "round": round}
    if not current_app.conf.task_always_eager:
        run_stage.apply_async(kwargs=kwargs)
        return
    queue = getattr(_eager, "queue", None)
    if queue is not None:
        queue.append(kwargs)
        return
    _eager.queue = [kwargs]
    try:
        while _eager.queue:
            run_stage.apply(kwargs=_eager.queue.pop(0), throw=True)
    finally:
        _eager.queue = None


def advance(*, job: EvolutionJob, to_state: str, event: str, stage: str | None = None, iteration: int = 0,
            round: int = 0, data: dict | None = None, stage_done: bool = True, **fields) -> EvolutionJob:  # noqa: A002
    """Transition from the job's current state and, after commit, send the stage that runs in the new state.
    `stage_done=False`: the running stage goes on in the new state (a hot swap's health check) and stays open."""
    stage_run = _running_stage.get()
    closing = (stage_done and stage_run is not None and stage_run.job_id == job.pk
               and stage_run.status == StageRun.Status.RUNNING)
    with transaction.atomic():
        # A move to an end state closes every stage still open as failed (jobs.py); the stage making the move is
        # closed here instead, with its own status: failed when it ends the job FAILED or CANCELLED.
        job = job_transition(job_id=job.pk, from_states=[job.state], to_state=to_state, actor=ACTOR, event=event,
                             data=data, keep_stage_id=stage_run.pk if closing else None, **fields)
        if closing:
            failed = str(to_state) in (S.FAILED, S.CANCELLED)
            _stage_close(stage_run, status=StageRun.Status.FAILED if failed else StageRun.Status.SUCCEEDED)
    if stage is not None:
        transaction.on_commit(lambda: stage_enqueue(job_id=job.pk, stage=stage, iteration=iteration, round=round))
    return job


def finish(*, job: EvolutionJob, to_state: str, reason: str, event: str | None = None, data: dict | None = None,
           **fields) -> EvolutionJob:
    return advance(job=job, to_state=to_state, event=event or to_state.lower(), data={**(data or {}), "reason": reason},
                   terminal_reason=reason, **fields)


def _claim(*, job: EvolutionJob, stage: str, iteration: int, round_: int) -> StageRun | None:
    """The (job, iteration, stage, round) key is unique: the insert is the claim, a duplicate delivery loses it."""
    it = Iteration.objects.filter(job=job, n=iteration).first() if iteration else None
    try:
        with transaction.atomic():
            return StageRun.objects.create(
                job=job, iteration=it, iteration_n=iteration, stage=stage, round=round_, claim=uuid.uuid4().hex,
                backend=job.backend_name if stage in ROLE_STAGES else "",
                isolation_level=job.sandbox_level if stage in SANDBOX_STAGES else "")
    except IntegrityError:
        return None


def stage_execute(*, job_id: int, stage: str, iteration: int = 0, round: int = 0) -> str:  # noqa: A002
    """Run one stage if the job is where this message expects it; returns what happened (for logs and tests)."""
    from evolution.services import stages_agent, stages_eval

    handlers = {**stages_agent.HANDLERS, **stages_eval.HANDLERS}
    job = EvolutionJob.objects.filter(pk=job_id).first()
    if job is None or job.is_terminal:
        return "gone"
    if stage == "prepare" and job.state == S.QUEUED:
        if job.stop_requested:
            return "cancelled"
        try:  # the conditional move out of QUEUED is the job's claim
            job = job_transition(job_id=job.pk, from_states=[S.QUEUED], to_state=S.PREPARING, actor=ACTOR,
                                 event="claimed")
        except JobStateError:
            return "lost claim"
    if job.state != STAGE_STATES[stage] or (iteration and job.current_iteration != iteration):
        return f"stale ({job.state}, iteration {job.current_iteration})"
    if job.stop_requested:
        finish(job=job, to_state=S.CANCELLED, reason="cancelled")
        return "cancelled"
    stage_run = _claim(job=job, stage=stage, iteration=iteration, round_=round)
    if stage_run is None:
        return "duplicate"
    token = _running_stage.set(stage_run)
    try:
        with Heartbeat(job_id=job.pk):
            outcome = handlers[stage](job=job, stage_run=stage_run, iteration=iteration, round_=round) or "done"
    except StopRequested:
        _stage_close(stage_run, status=StageRun.Status.FAILED, outcome="CANCELLED")
        job = EvolutionJob.objects.get(pk=job.pk)
        if not job.is_terminal:
            finish(job=job, to_state=S.CANCELLED, reason="cancelled")
        return "cancelled"
    except JobStateError as exc:  # someone else moved the job (a cancel, the janitor): this stage's work is moot
        _stage_close(stage_run, status=StageRun.Status.FAILED, outcome="SUPERSEDED", error=exc.message)
        return "superseded"
    except OperationalError:
        # The database went away: drop the claim so the task's retry can take the stage again.
        StageRun.objects.filter(pk=stage_run.pk).delete()
        raise
    except Exception as exc:
        logger.exception("evolution: job %s stage %s failed", job_id, stage)
        message = exc.message if isinstance(exc, ClearError) else f"{type(exc).__name__}: {exc}"
        code = exc.code if isinstance(exc, ClearError) else "stage_error"
        _stage_close(stage_run, status=StageRun.Status.FAILED, outcome="ERROR", error=message)
        evolution_job_fail(job_id=job_id, reason=f"{stage}:{code}"[:60], error=message, actor=ACTOR)
        return "failed"
    finally:
        _running_stage.reset(token)
    if stage_run.status == StageRun.Status.RUNNING:  # a handler that moved the job has closed it already
        _stage_close(stage_run, status=StageRun.Status.SUCCEEDED)
    return outcome


def _stage_close(stage_run: StageRun, *, status: str, outcome: str | None = None, error: str = "") -> None:
    fields = {"status": status, "finished_at": timezone.now()}
    if outcome is not None:
        fields["outcome"] = outcome
    if error:
        fields["error"] = error[:10000]
    StageRun.objects.filter(pk=stage_run.pk).update(**fields)
    for name, value in fields.items():
        setattr(stage_run, name, value)
