"""Push a project's tickets to its issue tracker (GitHub-compatible), now, in this process."""

import json

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.tickets.push import tickets_push


class Command(BaseCommand):
    help = ("Create, update or close the issues of a project's tickets on its connected tracker (set it up with "
            "`manage.py connect_issue_tracker`). Safe to repeat: issues are found again by their fingerprint.")

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")

    def handle(self, *args, **options):
        try:
            project = project_get_by_name(name=options["project"])
            summary = tickets_push(project=project)
        except ClearError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(json.dumps(summary.as_dict()))
        for error in summary.errors:
            self.stderr.write(f"ticket {error['ticket']}: {error['message']}")
