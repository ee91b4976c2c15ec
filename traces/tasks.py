from celery import shared_task


@shared_task(name="traces.finalize_trace", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def finalize_trace(trace_pk: str) -> None:
    from traces.services import trace_finalize

    trace_finalize(trace_pk=int(trace_pk))


@shared_task(name="traces.outbox_sweep", ignore_result=True)
def outbox_sweep() -> None:
    from traces.services import outbox_dispatch, outbox_prune

    outbox_dispatch()
    outbox_prune()


@shared_task(name="traces.enforce_retention", ignore_result=True)
def enforce_retention() -> None:
    """Daily (CELERY_BEAT_SCHEDULE): delete traces older than their project's retention_days."""
    from traces.services.lifecycle import traces_retention_enforce

    traces_retention_enforce()
