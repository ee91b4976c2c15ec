import time

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from clear.projects.selectors import worker_probe_get
from clear.projects.services import worker_probe_send


class Command(BaseCommand):
    help = "Send a probe task through the queue and wait for a worker to run it: is a worker alive?"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=30.0)

    def handle(self, *args, timeout: float, **options) -> None:
        with transaction.atomic():
            probe = worker_probe_send()
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            probe = worker_probe_get(token=probe.token)
            if probe and probe.finished_at:
                elapsed = time.monotonic() - started
                self.stdout.write(f"worker {probe.worker_hostname} answered in {elapsed:.2f}s")
                return
            time.sleep(0.1)
        raise CommandError(
            f"No worker ran the probe within {timeout:.0f}s. Start one: celery -A clear worker "
            "(scripts/demo.sh starts one for the embedded default)."
        )
