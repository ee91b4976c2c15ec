import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="traces.finalize_trace", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def finalize_trace(trace_pk: str) -> None:
    from traces.services import trace_finalize

    trace_finalize(trace_pk=int(trace_pk))


@shared_task(name="traces.finalize_traces", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def finalize_traces(trace_pks: list[str]) -> None:
    """Subscribed to trace.finalize (settings.CLEAR_OUTBOX_SUBSCRIPTIONS): the traces of one outbox dispatch round
    in one message (finalize_trace takes the messages of older releases still queued)."""
    from traces.services import trace_finalize

    failures = []
    for trace_pk in trace_pks:
        try:
            trace_finalize(trace_pk=int(trace_pk))
        except Exception as exc:  # noqa: BLE001 - one trace's failure must not hold back the others of the round
            logger.exception("finalize_traces: trace %s failed", trace_pk)
            failures.append(exc)
    if failures:
        raise failures[0]


@shared_task(name="traces.enforce_retention", ignore_result=True)
def enforce_retention() -> None:
    """Daily (CELERY_BEAT_SCHEDULE): delete traces older than their project's retention_days."""
    from traces.services.lifecycle import traces_retention_enforce

    traces_retention_enforce()


@shared_task(name="traces.span_partitions_ensure", ignore_result=True)
def span_partitions_ensure() -> None:
    """Hourly (CELERY_BEAT_SCHEDULE): create the coming days' span partitions (Postgres), moving any of their rows
    out of the default partition first."""
    from django.conf import settings

    from traces.services.partitions import span_partitions_ensure as ensure

    ensure(days_ahead=settings.CLEAR_SPAN_PARTITIONS_AHEAD)
