"""Webhook writes: subscriptions, emitting events, and delivering them (signed, retried with exponential backoff).

A delivery row is written when an event is emitted and sent by the `webhooks.deliver` task after commit. The row is
the source of truth: an attempt claims it with a conditional update (a redelivered or duplicated message finds
nothing to do), and the beat sweep re-sends deliveries whose message was lost.

URLs reach only public addresses unless CLEAR_WEBHOOK_ALLOW_PRIVATE is set: checked when saved and, pinned to the
checked addresses, at every attempt (clear.webhooks.targets, clear.webhooks.transport).
"""

import hashlib
import hmac
import json
import logging
import secrets
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from clear.projects.models import Project
from clear.webhooks.errors import WebhookInvalidError, WebhookTargetUnresolvedError
from clear.webhooks.models import Webhook, WebhookDelivery
from clear.webhooks.targets import webhook_target_resolve, webhook_url_check
from clear.webhooks.transport import WebhookAttempt, webhook_post

logger = logging.getLogger(__name__)

EVENTS = {
    "insight.created": "A new insight (failure cluster) was found.",
    "insight.regressed": "An insight got worse or came back.",
    "diagnosis_run.finished": "A diagnosis run reached a final status (succeeded, failed, cancelled, budget_exhausted).",
    "evolution_job.state_changed": "An evolution job moved from one state to another (every transition).",
}
PING_EVENT = "webhook.ping"  # sent on request to one webhook, whatever it subscribed to
SECRET_PREFIX = "whsec_"
Status = WebhookDelivery.Status


def _events_clean(events: list[str]) -> list[str]:
    unknown = sorted(set(events) - set(EVENTS))
    if unknown:
        raise WebhookInvalidError(f"Unknown event(s) {', '.join(unknown)}; use any of: {', '.join(EVENTS)}.",
                                  extra={"events": list(EVENTS)})
    if not events:
        raise WebhookInvalidError(f"Subscribe to at least one event: {', '.join(EVENTS)}.")
    return sorted(set(events))


def webhook_create(*, project: Project, url: str, events: list[str], secret: str = "", active: bool = True,
                   description: str = "") -> Webhook:
    """A new subscription; without a secret one is generated (returned once by the API, used to sign bodies)."""
    return Webhook.objects.create(project=project, url=webhook_url_check(url=url), events=_events_clean(events),
                                  secret=secret or SECRET_PREFIX + secrets.token_urlsafe(32), active=active,
                                  description=description)


def webhook_update(*, webhook: Webhook, url: str | None = None, events: list[str] | None = None,
                   secret: str | None = None, active: bool | None = None, description: str | None = None) -> Webhook:
    if url is not None:
        webhook.url = webhook_url_check(url=url)
    if events is not None:
        webhook.events = _events_clean(events)
    if secret:
        webhook.secret = secret
    if active is not None:
        webhook.active = active
    if description is not None:
        webhook.description = description
    webhook.save()
    return webhook


def webhook_delete(*, webhook: Webhook) -> None:
    webhook.delete()


def _envelope(*, project: Project, event: str, payload: dict, delivery_id) -> dict:
    # Normalised through JSON now, so what is stored is exactly what every attempt sends.
    data = json.loads(json.dumps(payload, cls=DjangoJSONEncoder))
    return {"id": str(delivery_id), "event": event, "created_at": timezone.now().isoformat(),
            "project": {"id": str(project.pk), "slug": project.slug}, "data": data}


def _deliveries_create(*, project: Project, webhooks: list[Webhook], event: str, payload: dict,
                       dedupe: uuid.UUID | None = None) -> list[WebhookDelivery]:
    now = timezone.now()
    deliveries = []
    for webhook in webhooks:
        delivery = WebhookDelivery(webhook=webhook, project=project, event=event, next_attempt_at=now)
        if dedupe is not None:
            delivery.id = uuid.uuid5(dedupe, str(webhook.pk))
        delivery.payload = _envelope(project=project, event=event, payload=payload, delivery_id=delivery.id)
        deliveries.append(delivery)
    # With `dedupe`, a second emission of the same event makes the same ids: nothing new is written, and sending
    # the existing deliveries again is harmless (an attempt claims its delivery first).
    WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=dedupe is not None)
    ids = [str(d.pk) for d in deliveries]
    if ids:
        transaction.on_commit(lambda: _send(ids))
    return deliveries


def webhook_event_emit(*, project: Project, event: str, payload: dict, dedupe: uuid.UUID | None = None
                       ) -> list[WebhookDelivery]:
    """Tell the project's active webhooks subscribed to `event`; they are sent after the caller's transaction
    commits (nothing is sent for a rolled-back change). Emitting twice with the same `dedupe` id sends once."""
    if event not in EVENTS:
        raise ValueError(f"Unknown webhook event {event!r}; add it to clear.webhooks.services.EVENTS")
    webhooks = [w for w in Webhook.objects.filter(project=project, active=True) if event in (w.events or [])]
    return _deliveries_create(project=project, webhooks=webhooks, event=event, payload=payload, dedupe=dedupe)


def webhook_ping(*, webhook: Webhook) -> WebhookDelivery:
    """Send a test event to one webhook (whatever it subscribed to)."""
    return _deliveries_create(project=webhook.project, webhooks=[webhook], event=PING_EVENT,
                              payload={"webhook": webhook.pk, "message": "Hello from Clear."})[0]


def _send(delivery_ids: list[str]) -> None:
    from clear.webhooks.tasks import deliver_webhook as deliver_webhook_task

    for delivery_id in delivery_ids:
        try:
            deliver_webhook_task.delay(delivery_id)
        except Exception:  # noqa: BLE001 - the sweep re-sends deliveries whose message never left
            logger.exception("webhooks.enqueue_failed delivery=%s", delivery_id)


def webhook_body(*, delivery: WebhookDelivery) -> bytes:
    return json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def webhook_signature(*, secret: str, body: bytes) -> str:
    """The `X-Clear-Signature` header: HMAC-SHA256 of the raw body with the webhook's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _backoff_seconds(attempts: int) -> float:
    base = settings.CLEAR_WEBHOOK_BACKOFF_SECONDS
    return min(settings.CLEAR_WEBHOOK_BACKOFF_MAX_SECONDS, base * 2 ** max(0, attempts - 1))


def _lease() -> timedelta:
    # An attempt that has been "sending" longer than this died with its worker; it may be claimed again.
    return timedelta(seconds=settings.CLEAR_WEBHOOK_TIMEOUT_SECONDS + 30)


def _post(*, delivery: WebhookDelivery) -> WebhookAttempt:
    """Send once, to the addresses the URL's host resolves to now, if webhooks may reach them (raises
    WebhookInvalidError, a WebhookTargetRefusedError, when they may not)."""
    try:
        target = webhook_target_resolve(url=delivery.webhook.url)
    except WebhookTargetUnresolvedError as exc:  # DNS may come back: retried like a refused connection
        return WebhookAttempt(code=None, body="", error=f"NameResolutionError: {exc.message}")
    body = webhook_body(delivery=delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Clear-Webhooks/1",
        "X-Clear-Event": delivery.event,
        "X-Clear-Delivery": str(delivery.pk),
        "X-Clear-Signature": webhook_signature(secret=delivery.webhook.secret, body=body),
    }
    return webhook_post(target=target, body=body, headers=headers, timeout=settings.CLEAR_WEBHOOK_TIMEOUT_SECONDS)


def webhook_delivery_attempt(*, delivery_id: str, now: datetime | None = None) -> float | None:
    """Make one attempt at a delivery. Returns the seconds until the next attempt, or None when there is nothing
    more to do (delivered, out of attempts, or another worker has it)."""
    now = now or timezone.now()
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.status not in WebhookDelivery.OPEN:
        return None
    claimable = Q(status=Status.PENDING) | Q(status=Status.SENDING, last_attempt_at__lt=now - _lease())
    claimed = WebhookDelivery.objects.filter(claimable, pk=delivery.pk, attempts=delivery.attempts).update(
        status=Status.SENDING, attempts=F("attempts") + 1, last_attempt_at=now)
    if not claimed:
        return None  # a copy of this message is sending it, or has sent it
    attempts = delivery.attempts + 1
    if not delivery.webhook.active:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=Status.FAILED, error="The webhook was deactivated.", next_attempt_at=None)
        return None
    try:
        attempt = _post(delivery=delivery)
    except WebhookInvalidError as exc:
        # A permanent failure: the host now is (or resolves to) an address webhooks may not reach, so no request
        # was made; retrying would only ask DNS again. The addresses go to the operator's log, not the row.
        WebhookDelivery.objects.filter(pk=delivery.pk, status=Status.SENDING).update(
            status=Status.FAILED, response_code=None, response_body="", next_attempt_at=None,
            error=f"TargetRefused: {exc.message}"[:2000])
        logger.warning("webhooks.refused delivery=%s webhook=%s event=%s addresses=%s: %s", delivery.pk,
                       delivery.webhook_id, delivery.event, ",".join(exc.extra.get("addresses", [])), exc.message)
        return None
    code = attempt.code
    fields = {"response_code": code, "response_body": attempt.body, "error": attempt.error}
    retry_in = None
    if code is not None and 200 <= code < 300:
        fields.update(status=Status.DELIVERED, delivered_at=timezone.now(), next_attempt_at=None)
    elif attempts >= settings.CLEAR_WEBHOOK_MAX_ATTEMPTS:
        fields.update(status=Status.FAILED, next_attempt_at=None)
    else:
        retry_in = _backoff_seconds(attempts)
        fields.update(status=Status.PENDING, next_attempt_at=timezone.now() + timedelta(seconds=retry_in))
    WebhookDelivery.objects.filter(pk=delivery.pk, status=Status.SENDING).update(**fields)
    logger.info("webhooks.attempt delivery=%s event=%s attempt=%d code=%s status=%s", delivery.pk, delivery.event,
                attempts, code, fields["status"])
    return retry_in


def webhook_deliveries_sweep(*, now: datetime | None = None, limit: int = 500) -> int:
    """Re-send deliveries that are due but whose message was lost (broker down at commit, worker died while
    sending). A message that was only late finds the delivery claimed and does nothing."""
    now = now or timezone.now()
    grace = timedelta(seconds=60)
    due = (WebhookDelivery.objects
           .filter(Q(status=Status.PENDING, next_attempt_at__lt=now - grace)
                   | Q(status=Status.SENDING, last_attempt_at__lt=now - _lease()))
           .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    ids = [str(pk) for pk in due]
    _send(ids)
    return len(ids)
