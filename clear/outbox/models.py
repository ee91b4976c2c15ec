from django.db import models


class OutboxItem(models.Model):
    """A fact or follow-up work written in the producer's transaction; a sweeper hands it to the subscribed Celery
    tasks, so a broker outage or a stopped worker delays the reactions but never loses them or fails the producer."""

    topic = models.CharField(max_length=100)
    key = models.CharField(max_length=200)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    available_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        # The table the traces app created (the model moved here in outbox 0001 / traces 0003 without touching the
        # database: existing databases keep their rows, a rename would gain nothing).
        db_table = "traces_outboxitem"
        constraints = [
            # One pending item per (topic, key): a trace receiving 100 batches gets finalised once, not 100 times.
            models.UniqueConstraint(
                fields=["topic", "key"], condition=models.Q(dispatched_at__isnull=True), name="outbox_pending_unique"
            )
        ]
        indexes = [models.Index(fields=["dispatched_at", "available_at"], name="outbox_pending")]
