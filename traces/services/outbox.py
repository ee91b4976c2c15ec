"""The transactional outbox: follow-up work is a row written with the data, handed to Celery after commit.

If the broker is down at commit time the row stays pending and the sweeper (a beat task, and
`manage.py outbox_drain`) sends it later. Tasks are idempotent, so a row sent twice does no harm.
"""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import connections, router, transaction
from django.db.models import F
from django.utils import timezone

from clear.celery import app as celery_app
from clear.db import on_postgres
from traces.models import OutboxItem
from traces.services.trace_rows import insert_select_parts, raw_cursor

logger = logging.getLogger(__name__)

TRACE_FINALIZE = "trace.finalize"
# Batches of one trace arrive close together; waiting a moment lets one finalisation cover them all.
FINALIZE_DELAY = timedelta(seconds=2)
_SWEEP_LIMIT = 500
_KEYS_PER_MESSAGE = 200
# After a broker failure, requests stop trying to dispatch for a while (the sweeper keeps trying): connecting to a
# dead broker costs seconds of client retries, which must not be added to every ingestion request.
_BROKER_BACKOFF_SECONDS = 30.0
_broker_down_until = 0.0
# Requests dispatch at most once per CLEAR_OUTBOX_DISPATCH_INTERVAL per process, each time everything pending: under
# load one publish round serves many requests instead of every request paying for its own (the sweeper covers the
# rest).
_last_dispatch = 0.0


def _task_for(topic: str):
    from traces.tasks import finalize_traces

    return {TRACE_FINALIZE: finalize_traces}[topic]


def outbox_enqueue(*, topic: str, keys: list[str], delay: timedelta = FINALIZE_DELAY) -> None:
    if not keys:
        return
    now = timezone.now()
    connection = connections[router.db_for_write(OutboxItem)]
    if on_postgres(connection):
        # One statement with server-side parameters: the ORM's bulk_create cost ~7% of an ingestion request.
        quote = connection.ops.quote_name
        columns, select, params = insert_select_parts(connection, OutboxItem, {
            "topic": "%(topic)s::text", "key": "k", "created_at": "%(now)s::timestamptz",
            "available_at": "%(available_at)s::timestamptz",
        })
        params.update(topic=topic, keys=list(keys), now=now, available_at=now + delay)
        with connection.wrap_database_errors, raw_cursor(connection) as cursor:
            cursor.execute(f"INSERT INTO {quote(OutboxItem._meta.db_table)} ({columns}) SELECT {select} "
                           "FROM unnest(%(keys)s::text[]) AS k ON CONFLICT DO NOTHING", params)
    else:
        OutboxItem.objects.bulk_create(
            [OutboxItem(topic=topic, key=key, available_at=now + delay) for key in keys], ignore_conflicts=True
        )
    transaction.on_commit(lambda: _dispatch_after_commit(limit=len(keys) * 2), robust=True)


def _dispatch_after_commit(*, limit: int) -> None:
    global _last_dispatch
    now = time.monotonic()
    if now < _broker_down_until or now - _last_dispatch < settings.CLEAR_OUTBOX_DISPATCH_INTERVAL:
        return
    _last_dispatch = now
    outbox_dispatch(limit=max(limit, _SWEEP_LIMIT), ready_only=False)


def _send(topic: str, items: list[OutboxItem], producer) -> None:
    """One message for many keys: publishing costs ~0.3 ms of CPU in the web process (and some in Redis) per
    message, so one per trace per batch was a fifth of an ingestion request."""
    task = _task_for(topic)
    countdown = max(0.0, max((item.available_at - timezone.now()).total_seconds() for item in items))
    # retry=False: with the broker down, fail at once and leave the rows for the sweeper instead of blocking.
    task.apply_async(args=[[item.key for item in items]], countdown=countdown, retry=False, producer=producer)


def outbox_dispatch(*, limit: int = _SWEEP_LIMIT, ready_only: bool = True) -> int:
    """Send pending items to Celery (one message per topic and _KEYS_PER_MESSAGE keys); returns how many items
    were sent. Safe to run from several processes."""
    with transaction.atomic():
        pending = OutboxItem.objects.filter(dispatched_at__isnull=True)
        if ready_only:
            pending = pending.filter(available_at__lte=timezone.now() + FINALIZE_DELAY)
        items = list(pending.order_by("available_at").select_for_update(skip_locked=True)[:limit])
        if not items:
            return 0
        by_topic: dict[str, list[OutboxItem]] = {}
        for item in items:
            by_topic.setdefault(item.topic, []).append(item)
        chunks = [chunk[i:i + _KEYS_PER_MESSAGE] for chunk in by_topic.values()
                  for i in range(0, len(chunk), _KEYS_PER_MESSAGE)]
        sent_ids, sent_chunks = [], 0
        try:
            with celery_app.producer_or_acquire() as producer:
                for chunk in chunks:
                    _send(chunk[0].topic, chunk, producer)
                    sent_ids += [item.pk for item in chunk]
                    sent_chunks += 1
        except Exception as exc:  # noqa: BLE001 - any broker failure means "try again later"
            _broker_down()
            failed = chunks[sent_chunks]
            OutboxItem.objects.filter(pk__in=[item.pk for item in failed]).update(
                attempts=F("attempts") + 1, last_error=str(exc)[:2000])
            logger.warning("outbox: broker unavailable, %d %s items stay pending: %s", len(items) - len(sent_ids),
                           failed[0].topic, exc)
        if sent_ids:
            OutboxItem.objects.filter(pk__in=sent_ids).update(dispatched_at=timezone.now(),
                                                              attempts=F("attempts") + 1)
    if sent_ids:
        _broker_up()
    return len(sent_ids)


def _broker_down() -> None:
    global _broker_down_until
    _broker_down_until = time.monotonic() + _BROKER_BACKOFF_SECONDS


def _broker_up() -> None:
    global _broker_down_until
    _broker_down_until = 0.0


def outbox_prune(*, older_than: timedelta = timedelta(days=1)) -> int:
    deleted, _ = OutboxItem.objects.filter(dispatched_at__lt=timezone.now() - older_than).delete()
    return deleted
