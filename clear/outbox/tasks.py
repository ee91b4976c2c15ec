"""Celery entrypoint of the outbox: the beat sweeper (settings.CELERY_BEAT_SCHEDULE["outbox-sweep"])."""

from celery import shared_task


@shared_task(name="outbox.sweep", ignore_result=True)
def outbox_sweep() -> None:
    """Hand pending rows to their subscribers (those a broker outage or a lost after-commit dispatch left), then
    forget rows sent a day ago."""
    from clear.outbox.services import outbox_dispatch, outbox_prune

    outbox_dispatch()
    outbox_prune()
