import json as jsonlib

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from clear.errors import ClearError
from clear.projects.services import api_key_create, project_create, user_get_or_create


class Command(BaseCommand):
    help = "Create a project (and its owner if needed) with a first API key; the secret is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--owner", help="E-mail of the owner; created without a password if new")
        parser.add_argument("--json", action="store_true", help="Print {project, public_key, secret_key} as JSON")

    def handle(self, *args, name: str, owner: str | None, json: bool, **options) -> None:
        try:
            with transaction.atomic():
                owner_user = user_get_or_create(email=owner)[0] if owner else None
                project = project_create(name=name, owner=owner_user)
                issued = api_key_create(project=project, name="created by create_project", created_by=owner_user)
        except ClearError as exc:
            raise CommandError(exc.message) from exc
        result = {
            "project": project.name,
            "slug": project.slug,
            "public_key": issued.api_key.public_key,
            "secret_key": issued.secret,
        }
        if json:
            self.stdout.write(_json_dumps(result))
        else:
            self.stdout.write(f"Project {project.name!r} created (slug {project.slug}).")
            self.stdout.write(f"Public key: {issued.api_key.public_key}")
            self.stdout.write(f"Secret key: {issued.secret}   (shown once; store it now)")


def _json_dumps(data: dict) -> str:
    return jsonlib.dumps(data)
