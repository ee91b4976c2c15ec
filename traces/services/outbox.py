"""The transactional outbox: follow-up work is a row written with the data, handed to Celery after commit.

If the broker is down at commit time the row stays pending and the sweeper (a beat task, and
`manage.py outbox_drain`) sends it later. Tasks are idempotent, so a row sent twice does no harm.
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from traces.models import OutboxItem

logger = logging.getLogger(__name__)

TRACE_FINALIZE = "trace.finalize"
# Batches of one trace arrive close together; waiting a moment lets one finalisation cover them all.
FINALIZE_DELAY = timedelta(seconds=2)
_SWEEP_LIMIT = 500


def _task_for(topic: str):
    from traces.tasks import finalize_trace

    return {TRACE_FINALIZE: finalize_trace}[topic]


def outbox_enqueue(*, topic: str, keys: list[str], delay: timedelta = FINALIZE_DELAY) -> None:
    if not keys:
        return
    now = timezone.now()
    OutboxItem.objects.bulk_create(
        [OutboxItem(topic=topic, key=key, available_at=now + delay) for key in keys], ignore_conflicts=True
    )
    transaction.on_commit(lambda: outbox_dispatch(limit=len(keys) * 2, ready_only=False), robust=True)


def _send(item: OutboxItem) -> None:
    task = _task_for(item.topic)
    countdown = max(0.0, (item.available_at - timezone.now()).total_seconds())
    # retry=False: with the broker down, fail at once and leave the row for the sweeper instead of blocking the request.
    task.apply_async(args=[item.key], countdown=countdown, retry=False)


def outbox_dispatch(*, limit: int = _SWEEP_LIMIT, ready_only: bool = True) -> int:
    """Send pending items to Celery; returns how many were sent. Safe to run from several processes."""
    sent = 0
    with transaction.atomic():
        pending = OutboxItem.objects.filter(dispatched_at__isnull=True)
        if ready_only:
            pending = pending.filter(available_at__lte=timezone.now() + FINALIZE_DELAY)
        items = list(pending.order_by("available_at").select_for_update(skip_locked=True)[:limit])
        for item in items:
            try:
                _send(item)
            except Exception as exc:  # noqa: BLE001 - any broker failure means "try again later"
                OutboxItem.objects.filter(pk=item.pk).update(attempts=F("attempts") + 1, last_error=str(exc)[:2000])
                logger.warning("outbox: broker unavailable, %s stays pending: %s", item.topic, exc)
                break
            OutboxItem.objects.filter(pk=item.pk).update(dispatched_at=timezone.now(), attempts=F("attempts") + 1)
            sent += 1
    return sent


def outbox_prune(*, older_than: timedelta = timedelta(days=1)) -> int:
    deleted, _ = OutboxItem.objects.filter(dispatched_at__lt=timezone.now() - older_than).delete()
    return deleted
