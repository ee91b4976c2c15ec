"""`manage.py enforce_retention [--project NAME] [--dry-run] [--json]`: delete the traces past their project's
retention now (the daily beat task does the same), or with --dry-run only say how many would go."""

import json

from django.core.management.base import BaseCommand, CommandParser

from clear.projects.models import Project
from traces.management.commands.import_traces import project_or_command_error
from traces.services.lifecycle import traces_retention_enforce


class Command(BaseCommand):
    help = ("Delete the traces older than their project's retention (Settings > Data retention, else "
            "CLEAR_RETENTION_DAYS; neither set: kept forever). Expired traces leave their id, so links to them say "
            "they expired; insights and tickets keep their figures. --dry-run only counts.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", help="name or slug of one project (default: every project)")
        parser.add_argument("--dry-run", action="store_true", help="count the traces that would go, delete nothing")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options) -> None:
        if options["project"]:
            projects = [project_or_command_error(options["project"])]
        else:
            projects = list(Project.objects.order_by("slug"))
        report = traces_retention_enforce(dry_run=options["dry_run"], projects=projects)
        if options["json"]:
            self.stdout.write(json.dumps(report))
            return
        if not report:
            self.stdout.write("No project has a retention: every trace is kept (set CLEAR_RETENTION_DAYS or a "
                              "project's retention in Settings > Data retention).")
        verb = "would delete" if options["dry_run"] else "deleted"
        for row in report:
            self.stdout.write(f"{row['project']}: keeps {row['days']} days; {verb} {row['traces']} trace(s)")
