from django.core.management.base import BaseCommand

from clear.outbox.selectors import outbox_pending_count
from clear.outbox.services import outbox_dispatch


class Command(BaseCommand):
    help = "Hand every pending outbox item to its subscribers now (beat does this every few seconds)."

    def handle(self, *args, **options) -> None:
        sent = outbox_dispatch(ready_only=False, limit=100_000)
        self.stdout.write(f"sent {sent} outbox item(s); {outbox_pending_count()} still pending")
