"""Writes for projects, members, API keys and worker probes."""

import hashlib
import secrets
import time
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.text import slugify

from clear.errors import ClearError, ConflictError
from clear.projects.models import ApiKey, Membership, Project, WorkerProbe

PUBLIC_KEY_PREFIX = "pk-clear-"
SECRET_KEY_PREFIX = "sk-clear-"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedApiKey:
    api_key: ApiKey
    secret: str  # shown once; never stored


def user_get_or_create(*, email: str, password: str | None = None) -> tuple[AbstractBaseUser, bool]:
    email = email.strip().lower()
    if "@" not in email:
        raise ClearError(f"{email!r} is not an e-mail address", code="invalid_email")
    user_model = get_user_model()
    user = user_model.objects.filter(username=email).first()
    if user:
        return user, False
    user = user_model(username=email, email=email)
    if password:
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    return user, True


def _unique_slug(name: str) -> str:
    base = slugify(name)[:80] or "project"
    slug, n = base, 2
    while Project.objects.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


@transaction.atomic
def project_create(*, name: str, owner: AbstractBaseUser | None = None) -> Project:
    name = name.strip()
    if not name:
        raise ClearError("A project needs a name", code="invalid_name")
    if Project.objects.filter(name=name).exists():
        raise ConflictError(f"A project named {name!r} exists already; pick another name", code="duplicate_name")
    project = Project.objects.create(name=name, slug=_unique_slug(name))
    if owner is not None:
        Membership.objects.create(project=project, user=owner, role=Membership.Role.OWNER)
    return project


def membership_add(*, project: Project, user: AbstractBaseUser, role: str = Membership.Role.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    return membership


def api_key_create(*, project: Project, name: str = "", created_by: AbstractBaseUser | None = None) -> IssuedApiKey:
    secret = SECRET_KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        project=project,
        name=name,
        public_key=PUBLIC_KEY_PREFIX + secrets.token_hex(12),
        secret_hash=secret_hash(secret),
        secret_hint=secret[: len(SECRET_KEY_PREFIX) + 4],
        created_by=created_by,
    )
    return IssuedApiKey(api_key=api_key, secret=secret)


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db()
    return api_key


def api_key_touch(*, api_key: ApiKey) -> None:
    """Record use at most once a minute: a write per ingestion request would contend on one row."""
    now = timezone.now()
    if api_key.last_used_at is None or (now - api_key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now


def worker_probe_run(*, token: str, hostname: str, hold_seconds: float = 0.0) -> WorkerProbe | None:
    """Count a delivery, optionally hold the task (to let tests kill the worker mid-task), then finish once."""
    WorkerProbe.objects.filter(token=token).update(attempts=F("attempts") + 1, worker_hostname=hostname)
    if hold_seconds:
        time.sleep(hold_seconds)
    claimed = WorkerProbe.objects.filter(token=token, finished_at__isnull=True).update(finished_at=timezone.now())
    if not claimed:
        return None
    return WorkerProbe.objects.get(token=token)


def worker_probe_send(*, token: str | None = None, hold_seconds: float = 0.0) -> WorkerProbe:
    from clear.projects.tasks import worker_probe as worker_probe_task

    probe = WorkerProbe.objects.create(token=token or secrets.token_hex(16))
    transaction.on_commit(lambda: worker_probe_task.delay(probe.token, hold_seconds))
    return probe
