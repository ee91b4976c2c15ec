import json as jsonlib
import secrets
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from clear.projects.models import Project
from clear.projects.services import api_key_create, membership_add, project_create, user_get_or_create
from diagnosis.services.rubrics import rubric_create_demo_set

DEMO_EMAIL = "demo@clear.local"
DEMO_PROJECT = "Support desk demo"


class Command(BaseCommand):
    help = (
        "Create the demo user, project and API key once, and keep the credentials in var/demo-credentials.json "
        "(a secret is only shown once, so the demo keeps its own copy to print on every start)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, json: bool, **options) -> None:
        credentials_path = Path(settings.VAR_DIR) / "demo-credentials.json"
        credentials = self._load(credentials_path)
        if credentials is None:
            credentials = self._create()
            credentials_path.parent.mkdir(parents=True, exist_ok=True)
            credentials_path.write_text(jsonlib.dumps(credentials, indent=2))
            credentials_path.chmod(0o600)
        if json:
            self.stdout.write(jsonlib.dumps(credentials))
        else:
            for key, value in credentials.items():
                self.stdout.write(f"{key:>12}: {value}")

    def _load(self, path: Path) -> dict | None:
        if not path.exists():
            return None
        credentials = jsonlib.loads(path.read_text())
        # A wiped database with a kept var/ file: the stored secret is void, so issue everything again.
        if not Project.objects.filter(name=credentials.get("project")).exists():
            return None
        return credentials

    @transaction.atomic
    def _create(self) -> dict:
        password = secrets.token_urlsafe(12)
        user, _ = user_get_or_create(email=DEMO_EMAIL)
        user.set_password(password)
        user.save()
        project = Project.objects.filter(name=DEMO_PROJECT).first() or project_create(name=DEMO_PROJECT)
        membership_add(project=project, user=user, role="owner")
        issued = api_key_create(project=project, name="demo", created_by=user)
        rubric_create_demo_set(project=project)
        return {
            "login": DEMO_EMAIL,
            "password": password,
            "project": project.name,
            "slug": project.slug,
            "public_key": issued.api_key.public_key,
            "secret_key": issued.secret,
        }
