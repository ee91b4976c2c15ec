"""Connect a project to a GitHub-compatible issues API (the token is read from an environment variable)."""

import os

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.tickets.services import issue_tracker_connect


class Command(BaseCommand):
    help = "Set where `push_tickets` sends a project's tickets: base URL, repository owner/name and token."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")
        parser.add_argument("--repository", required=True, help="owner/name")
        parser.add_argument("--base-url", default="https://api.github.com",
                            help="the API root, e.g. https://github.example.com/api/v3 for GitHub Enterprise")
        parser.add_argument("--token-env", default="GITHUB_TOKEN",
                            help="environment variable holding the token (kept out of the shell history)")
        parser.add_argument("--disable", action="store_true", help="keep the connection but push nothing")

    def handle(self, *args, **options):
        token = os.environ.get(options["token_env"]) or None
        try:
            connection = issue_tracker_connect(
                project=project_get_by_name(name=options["project"]), repository=options["repository"],
                token=token, base_url=options["base_url"], enabled=not options["disable"])
        except ClearError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"{connection} (token {connection.token_hint}, "
                          f"{'enabled' if connection.enabled else 'disabled'})")
