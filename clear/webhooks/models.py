import uuid

from django.db import models

from clear.projects.models import Project


class Webhook(models.Model):
    """An endpoint of a project that receives the events it subscribed to."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    # Kept in clear: it signs every delivery, so it must be readable (unlike API key secrets).
    secret = models.CharField(max_length=200)
    events = models.JSONField(default=list, help_text="event names, e.g. ['diagnosis_run.finished']")
    active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["project", "active"], name="webhook_project_active")]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event sent to one webhook, with its attempts; its id is the `X-Clear-Delivery` header, so receivers can
    drop repeats."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"  # waiting for its first or next attempt
        SENDING = "sending", "Sending"  # an attempt is in progress
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"  # out of attempts

    OPEN = (Status.PENDING, Status.SENDING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    event = models.CharField(max_length=100)
    payload = models.JSONField(help_text="the whole JSON body sent, envelope included")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, help_text="the start of the last response's body")
    error = models.TextField(blank=True, help_text="the last attempt's connection error, if any")
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["webhook", "-created_at"], name="delivery_webhook_created"),
            models.Index(fields=["status", "next_attempt_at"], name="delivery_status_next"),
        ]
