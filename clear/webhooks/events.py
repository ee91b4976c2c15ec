"""How other apps' happenings become webhook events. The app that owns the data builds the body; nothing here knows
any app's models.

- Facts published through the outbox whose topic is a webhook event (`diagnosis_run.finished`,
  `evolution_job.state_changed`) reach `webhooks.emit` (settings.CLEAR_OUTBOX_SUBSCRIPTIONS): the fact's data is
  `{"project": <id>, "body": <the event's data>}`, built by the producer in its own transaction.
- Events computed inside another app's transaction (`insight.*`, from an insights build) go through
  `webhook_events_emit_safely`, which never raises (a webhook problem must not fail the work that emitted it).
"""

import logging
import uuid
from collections.abc import Callable, Iterable

from django.db import transaction

from clear.projects.models import Project
from clear.webhooks.models import Webhook
from clear.webhooks.services import EVENTS, webhook_event_emit

logger = logging.getLogger(__name__)

# Delivery ids of a fact's events are derived from the fact's key: a fact handed over twice sends once.
_FACT_NAMESPACE = uuid.UUID("6a0f7f4e-3d2c-4b8e-9a51-0c1e2d3f4a5b")


def webhooks_listening(*, project_id) -> bool:
    """Whether the project has an active webhook (so that building a body is worth it)."""
    return Webhook.objects.filter(project_id=project_id, active=True).exists()


def webhook_events_emit_safely(*, project_id, events: Callable[[], Iterable[tuple[str, dict]]], context: str
                               ) -> None:
    """Emit each `(event, body)` that `events()` yields to the project's webhooks; call inside the producer's
    transaction (sent after it commits). `events` is not called when no webhook is active. Never raises."""
    try:
        with transaction.atomic():  # a savepoint: an error here must not poison the caller's transaction
            if not webhooks_listening(project_id=project_id):
                return
            project = Project.objects.get(pk=project_id)
            for event, body in events():
                webhook_event_emit(project=project, event=event, payload=body)
    except Exception:  # noqa: BLE001 - see the docstring
        logger.exception("webhooks.emit_failed %s", context)


def webhook_facts_emit(*, facts: list[dict]) -> int:
    """Turn outbox facts whose topic is a webhook event into deliveries (idempotent per fact); returns how many
    deliveries were written."""
    written = 0
    for fact in facts:
        event, data = fact["topic"], fact.get("data") or {}
        if event not in EVENTS:
            logger.error("webhooks.emit: %s is not a webhook event (CLEAR_OUTBOX_SUBSCRIPTIONS)", event)
            continue
        project = Project.objects.filter(pk=data.get("project")).first()
        if project is None:  # deleted since
            continue
        with transaction.atomic():
            written += len(webhook_event_emit(project=project, event=event, payload=data.get("body") or {},
                                              dedupe=uuid.uuid5(_FACT_NAMESPACE, f"{event}:{fact['key']}")))
    return written
