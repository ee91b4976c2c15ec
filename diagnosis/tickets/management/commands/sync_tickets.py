"""Make or refresh a project's tickets from its insights (runs after every insights build; this repairs)."""

import json

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.tickets.services import ticket_sync_for_insights


class Command(BaseCommand):
    help = "Create or update one ticket per insight of a project (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")

    def handle(self, *args, **options):
        try:
            summary = ticket_sync_for_insights(project=project_get_by_name(name=options["project"]))
        except ClearError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(json.dumps(summary.as_dict()))
