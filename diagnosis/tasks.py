"""Celery entrypoints of the diagnosis app: load by id, call a service. Every task is safe to run twice."""

from celery import shared_task


@shared_task(name="diagnosis.start_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def start_diagnosis_run(run_id: str) -> None:
    from diagnosis.services import diagnosis_run_begin, diagnosis_run_fail

    try:
        diagnosis_run_begin(run_id=run_id)
    except Exception as exc:
        diagnosis_run_fail(run_id=run_id, error=f"{type(exc).__name__}: {exc}")
        raise


@shared_task(name="diagnosis.judge_trace", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def judge_trace(item_id: str) -> None:
    from diagnosis.services import run_trace_process

    run_trace_process(item_id=int(item_id))


@shared_task(name="diagnosis.continuous_tick", ignore_result=True)
def continuous_diagnosis() -> None:
    from diagnosis.services import continuous_tick, diagnosis_runs_sweep

    continuous_tick()
    diagnosis_runs_sweep()
