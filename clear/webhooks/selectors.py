"""Reads of webhooks and their deliveries, always scoped to a project."""

from django.db.models import QuerySet

from clear.projects.models import Project
from clear.webhooks.errors import WebhookNotFoundError
from clear.webhooks.models import Webhook, WebhookDelivery


def webhook_list(*, project: Project) -> QuerySet[Webhook]:
    return Webhook.objects.filter(project=project).order_by("pk")


def webhook_get(*, project: Project, webhook_id: int) -> Webhook:
    webhook = Webhook.objects.filter(project=project, pk=webhook_id).first()
    if webhook is None:
        raise WebhookNotFoundError(f"No webhook {webhook_id} in this project.")
    return webhook


def webhook_delivery_list(*, project: Project, webhook: Webhook, status: str | None = None
                          ) -> QuerySet[WebhookDelivery]:
    deliveries = WebhookDelivery.objects.filter(project=project, webhook=webhook)
    if status:
        deliveries = deliveries.filter(status=status)
    return deliveries.order_by("-created_at", "-pk")
