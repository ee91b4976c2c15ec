"""The transactional outbox: the one durable channel for facts ("a trace was deleted", "a run's insights were built")
and follow-up work ("finalise these traces").

A producer publishes in its own transaction: the row commits with the data or not at all. After commit (and every few
seconds from the beat sweeper, and from `manage.py outbox_drain`) pending rows are handed to the Celery tasks that
settings.CLEAR_OUTBOX_SUBSCRIPTIONS lists for their topic, by task name: the producer imports nothing of its
subscribers. If the broker is down the row stays pending and the sweeper sends it later; a stopped worker finds the
messages on the broker when it starts. Subscribers are idempotent, so a fact delivered twice does no harm.

A subscriber task takes one argument, the items of one dispatch round for its topic: each fact (`outbox_publish`) as
`{"topic": ..., "key": ..., "data": {...}}` (`data` is what the producer published), each data-less item
(`outbox_publish_keys`, trace.finalize) as its bare key, which is all it needs: a fifth of the message, and about a
tenth of the JSON encoding in the ingesting process.
"""

import json
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from celery import Task
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, router, transaction
from django.db.models import F
from django.utils import timezone
from kombu import Producer

from clear.celery import app as celery_app
from clear.db import insert_select_parts, on_postgres, raw_cursor
from clear.outbox.models import OutboxItem

logger = logging.getLogger(__name__)

# Rows due this soon are sent by a sweep already (with a countdown): batches of one trace arrive close together and
# trace.finalize waits this long so that one finalisation covers them all.
READY_AHEAD = timedelta(seconds=2)
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


class OutboxSubscriberUnknownError(LookupError):
    """CLEAR_OUTBOX_SUBSCRIPTIONS names a task no module registers (the row stays pending, with this error)."""


def outbox_subscribers(*, topic: str) -> list[Task]:
    """The Celery tasks subscribed to `topic` (settings.CLEAR_OUTBOX_SUBSCRIPTIONS), looked up by name in this
    process's registry (importing every app's task modules the first time: seconds, so the web processes send by
    name instead, see _send)."""
    names = settings.CLEAR_OUTBOX_SUBSCRIPTIONS.get(topic, [])
    if any(name not in celery_app.tasks for name in names):
        celery_app.loader.import_default_modules()  # the worker's autodiscovery
    unknown = [name for name in names if name not in celery_app.tasks]
    if unknown:
        raise OutboxSubscriberUnknownError(f"CLEAR_OUTBOX_SUBSCRIPTIONS[{topic!r}] names unknown task(s) {unknown}")
    return [celery_app.tasks[name] for name in names]


def outbox_publish(*, topic: str, data: dict, key: str = "", delay: timedelta = timedelta(0)) -> None:
    """Publish one fact in the caller's transaction (sent to the topic's subscribers after commit). `key` makes a
    fact unique while it is pending (a second one with the same key is dropped); by default every fact is new.
    `data` says what happened (never empty: an item without data is sent as its bare key)."""
    if not data:
        raise ValueError(f"outbox_publish({topic!r}): a fact carries data; use outbox_publish_keys for bare keys")
    # Normalised through JSON now (datetimes, UUIDs): what is stored is what every subscriber receives.
    data = json.loads(json.dumps(data, cls=DjangoJSONEncoder))
    now = timezone.now()
    OutboxItem.objects.bulk_create(
        [OutboxItem(topic=topic, key=key or uuid.uuid4().hex, payload=data, available_at=now + delay)],
        ignore_conflicts=True)
    # Facts are few (a run finished, a job moved): each goes out at once, not at the next sweep.
    transaction.on_commit(lambda: _dispatch_after_commit(limit=1, throttled=False), robust=True)


def outbox_publish_keys(*, topic: str, keys: list[str], delay: timedelta = READY_AHEAD) -> None:
    """Publish one data-less item per key (pending duplicates dropped): the ingestion hot path (trace.finalize)."""
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


def _dispatch_after_commit(*, limit: int, throttled: bool = True) -> None:
    global _last_dispatch
    now = time.monotonic()
    if now < _broker_down_until or (throttled and now - _last_dispatch < settings.CLEAR_OUTBOX_DISPATCH_INTERVAL):
        return
    _last_dispatch = now
    outbox_dispatch(limit=max(limit, _SWEEP_LIMIT), ready_only=False)


def _send(topic: str, items: list[OutboxItem], producer) -> None:
    """One message per subscriber for many items: publishing costs ~0.3 ms of CPU in the web process (and some in
    Redis) per message, so one per trace per batch was a fifth of an ingestion request."""
    names = settings.CLEAR_OUTBOX_SUBSCRIPTIONS.get(topic, [])
    if not names:
        return
    countdown = max(0.0, max((item.available_at - timezone.now()).total_seconds() for item in items))
    facts = [{"topic": topic, "key": item.key, "data": item.payload} if item.payload else item.key for item in items]
    if celery_app.conf.task_always_eager:  # no broker (tests): the tasks run here and now
        for task in outbox_subscribers(topic=topic):
            task.apply_async(args=[facts])
        return
    for name in names:
        # By name: the sending process need not import the subscriber (tests/clear/test_outbox.py checks that every
        # name is a registered task). retry=False: with the broker down, fail at once and leave the rows for the
        # sweeper instead of blocking.
        celery_app.send_task(name, args=[facts], countdown=countdown, retry=False, producer=producer)


def outbox_dispatch(*, limit: int = _SWEEP_LIMIT, ready_only: bool = True) -> int:
    """Send pending items to their subscribers (one message per topic, subscriber and _KEYS_PER_MESSAGE items);
    returns how many items were sent. Safe to run from several processes."""
    with transaction.atomic():
        pending = OutboxItem.objects.filter(dispatched_at__isnull=True)
        if ready_only:
            pending = pending.filter(available_at__lte=timezone.now() + READY_AHEAD)
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
            with _publisher() as producer:
                for chunk in chunks:
                    _send(chunk[0].topic, chunk, producer)
                    sent_ids += [item.pk for item in chunk]
                    sent_chunks += 1
        except Exception as exc:  # noqa: BLE001 - any broker failure means "try again later"
            if not celery_app.conf.task_always_eager:  # eagerly (tests) it is the subscriber that failed
                _broker_down()
            failed = chunks[sent_chunks]
            OutboxItem.objects.filter(pk__in=[item.pk for item in failed]).update(
                attempts=F("attempts") + 1, last_error=f"{type(exc).__name__}: {exc}"[:2000])
            logger.warning("outbox: %d %s items stay pending: %s", len(items) - len(sent_ids), failed[0].topic, exc)
        if sent_ids:
            OutboxItem.objects.filter(pk__in=sent_ids).update(dispatched_at=timezone.now(),
                                                              attempts=F("attempts") + 1)
    if sent_ids:
        _broker_up()
    return len(sent_ids)


@contextmanager
def _publisher() -> Iterator[Producer]:
    """A producer on a connection of its own that gives up at the first refused connect: kombu's default retries
    (~6 s of sleeps) would hold the ingestion request that commits the rows, and the sweeper sends them later
    anyway. (The pooled connections keep their retries for everything else.)"""
    if celery_app.conf.task_always_eager:
        yield None
        return
    with celery_app.connection_for_write(transport_options={"max_retries": 0}) as conn:
        yield conn.Producer()


def _broker_down() -> None:
    global _broker_down_until
    _broker_down_until = time.monotonic() + _BROKER_BACKOFF_SECONDS


def _broker_up() -> None:
    global _broker_down_until
    _broker_down_until = 0.0


def outbox_prune(*, older_than: timedelta = timedelta(days=1)) -> int:
    deleted, _ = OutboxItem.objects.filter(dispatched_at__lt=timezone.now() - older_than).delete()
    return deleted
