"""Reads for projects and keys; every page and API resolves a project through here."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from clear.errors import NotFoundError
from clear.projects.models import ApiKey, Project, WorkerProbe


def project_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Project]:
    return Project.objects.filter(memberships__user=user).order_by("name")


def project_get_for_user(*, user: AbstractBaseUser, slug: str) -> Project:
    """A project the user belongs to; anything else is 'not found', so outsiders learn nothing."""
    project = project_list_for_user(user=user).filter(slug=slug).first()
    if project is None:
        raise NotFoundError(f"No project {slug!r} among yours")
    return project


def project_get_by_name(*, name: str) -> Project:
    project = Project.objects.filter(name=name).first() or Project.objects.filter(slug=name).first()
    if project is None:
        raise NotFoundError(f"No project named {name!r}")
    return project


def api_key_list(*, project: Project) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(project=project).order_by("-created_at")


def api_key_get_by_secret_hash(*, secret_hash: str) -> ApiKey | None:
    return ApiKey.objects.select_related("project").filter(secret_hash=secret_hash).first()


def worker_probe_get(*, token: str) -> WorkerProbe | None:
    return WorkerProbe.objects.filter(token=token).first()

