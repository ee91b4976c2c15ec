from clear.outbox.models import OutboxItem


def outbox_pending_count(*, topic: str | None = None) -> int:
    pending = OutboxItem.objects.filter(dispatched_at__isnull=True)
    return (pending.filter(topic=topic) if topic else pending).count()
