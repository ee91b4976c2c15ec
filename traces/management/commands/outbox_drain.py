from django.core.management.base import BaseCommand

from traces.models import OutboxItem
from traces.services import outbox_dispatch


class Command(BaseCommand):
    help = "Hand every pending outbox item to the task queue now (beat does this every few seconds)."

    def handle(self, *args, **options) -> None:
        sent = outbox_dispatch(ready_only=False, limit=100_000)
        left = OutboxItem.objects.filter(dispatched_at__isnull=True).count()
        self.stdout.write(f"sent {sent} outbox item(s); {left} still pending")
