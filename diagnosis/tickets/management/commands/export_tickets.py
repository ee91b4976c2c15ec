"""Export a project's bug list (its tickets) as Markdown, CSV or JSON."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.tickets.export import OUTPUTS, tickets_export
from diagnosis.tickets.selectors import STATUS_FILTERS


class Command(BaseCommand):
    help = "Print (or write to --file) a project's tickets with their evidence as Markdown, CSV or JSON."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")
        parser.add_argument("--output", choices=OUTPUTS, default="md")
        parser.add_argument("--status", choices=STATUS_FILTERS, default="open",
                            help='"open": unresolved tickets (open and in_progress); "all": every ticket')
        parser.add_argument("--file", help="write here instead of standard output")

    def handle(self, *args, **options):
        try:
            project = project_get_by_name(name=options["project"])
            text = tickets_export(project=project, output=options["output"], status=options["status"])
        except ClearError as exc:
            raise CommandError(exc.message) from None
        if options["file"]:
            Path(options["file"]).write_text(text, encoding="utf-8")
            self.stderr.write(f"Wrote {options['file']}")
        else:
            self.stdout.write(text, ending="")
