"""Celery entrypoints of the webhooks app: load by id, call a service. Safe to run twice (see services)."""

from celery import shared_task


@shared_task(name="webhooks.deliver", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=None)
def deliver_webhook(self, delivery_id: str) -> None:
    # Attempts are counted and bounded on the delivery row (CLEAR_WEBHOOK_MAX_ATTEMPTS), not by Celery.
    from clear.webhooks.services import webhook_delivery_attempt

    retry_in = webhook_delivery_attempt(delivery_id=delivery_id)
    while retry_in is not None and self.request.is_eager:
        # Eager tasks (tests, no broker) have no "later" to be retried in: the next attempt is now.
        retry_in = webhook_delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)


@shared_task(name="webhooks.sweep", ignore_result=True)
def sweep_webhook_deliveries() -> None:
    from clear.webhooks.services import webhook_deliveries_sweep

    webhook_deliveries_sweep()


@shared_task(name="webhooks.emit", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def emit_webhook_facts(facts: list[dict]) -> None:
    """Subscribed (settings.CLEAR_OUTBOX_SUBSCRIPTIONS) to the facts that are webhook events of the same name."""
    from clear.webhooks.events import webhook_facts_emit

    webhook_facts_emit(facts=facts)
