"""Reads for projects, keys and the audit log; every page and API resolves a project through here."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, OuterRef, Q, QuerySet

from clear.errors import NotFoundError
from clear.projects.models import ApiKey, AuditEvent, Membership, Project, WorkerProbe


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



def api_key_get_by_public_key(*, public_key: str) -> ApiKey | None:
    return ApiKey.objects.select_related("project").filter(public_key=public_key).first()


def user_get_by_login(*, username: str) -> AbstractBaseUser | None:
    """The account a login form's name means, whatever its case (to attribute failed logins)."""
    user_model = get_user_model()
    name_field = f"{user_model.USERNAME_FIELD}__iexact"
    return user_model.objects.filter(**{name_field: username.strip()}).order_by("pk").first()


def membership_is_owner(*, project: Project, user: AbstractBaseUser) -> bool:
    return Membership.objects.filter(project=project, user=user, role=Membership.Role.OWNER).exists()


def audit_event_list(*, project: Project) -> QuerySet[AuditEvent]:
    """The project's events (its keys), and the account events (logins) of its members since they joined it: an owner
    sees who got into the project and who tried, not a member's history before it."""
    member_then = Membership.objects.filter(project=project, user=OuterRef("user_id"),
                                            created_at__lte=OuterRef("created_at"))
    return (AuditEvent.objects.alias(member_then=Exists(member_then))
            .filter(Q(project=project) | Q(project__isnull=True, user__isnull=False, member_then=True))
            .select_related("user").order_by("-created_at", "-pk"))
