"""The diagnosis app's reactions to other apps' facts (clear.outbox; settings.CLEAR_OUTBOX_SUBSCRIPTIONS names these
tasks). Each takes the facts of one dispatch round and is safe to run twice."""

from celery import shared_task


@shared_task(name="diagnosis.runs_finish_after_trace_delete", acks_late=True, reject_on_worker_lost=True,
             ignore_result=True)
def runs_finish_after_trace_delete(facts: list[dict]) -> None:
    """trace.deleted: the active runs that held the deleted traces (named by the deletion hook,
    diagnosis/services/trace_deletion.py) finish if nothing else is open."""
    from diagnosis.services.runs import run_finish_if_complete

    for fact in facts:
        for run_id in ((fact["data"].get("diagnosis") or {}).get("active_runs") or []):
            run_finish_if_complete(run_id=run_id)
