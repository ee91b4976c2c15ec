"""Writes for projects, members, API keys, the audit log and worker probes; the guards of logins and API keys."""

import hashlib
import logging
import secrets
import time
import unicodedata
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.text import slugify

from clear.errors import ClearError, ConflictError
from clear.projects import auth_throttle
from clear.projects.auth_throttle import AuthThrottledError
from clear.projects.models import ApiKey, AuditEvent, Membership, Project, WorkerProbe
from clear.projects.selectors import api_key_get_by_public_key, user_get_by_login

# Failed logins and keys, throttling: one line each, for the operator (and fail2ban-like tools) to watch.
auth_logger = logging.getLogger("clear.auth")

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


def audit_event_record(*, kind: str, project: Project | None = None, user: AbstractBaseUser | None = None,
                       address: str | None = None, detail: dict[str, Any] | None = None) -> AuditEvent:
    return AuditEvent.objects.create(kind=kind, project=project, user=user if user and user.pk else None,
                                     address=address or None, detail=detail or {})


RETENTION_MAX_DAYS = 36500


def project_retention_set(*, project: Project, days: int | None, user: AbstractBaseUser | None = None,
                          address: str | None = None) -> Project:
    """Set how many days the project keeps traces: None follows the server's CLEAR_RETENTION_DAYS, 0 keeps them
    forever. Recorded in the audit log (a shorter retention deletes data at the next daily run)."""
    if days is not None and not 0 <= days <= RETENTION_MAX_DAYS:
        raise ClearError(f"Retention is a number of days from 0 (keep forever) to {RETENTION_MAX_DAYS}, or empty to "
                         f"follow the server's default; got {days}.")
    before = project.retention_days
    Project.objects.filter(pk=project.pk).update(retention_days=days)
    project.retention_days = days
    if before != days:
        audit_event_record(kind=AuditEvent.Kind.RETENTION_CHANGED, project=project, user=user, address=address,
                           detail={"from": before, "to": days})
    return project


@transaction.atomic
def api_key_create(*, project: Project, name: str = "", created_by: AbstractBaseUser | None = None,
                   address: str | None = None) -> IssuedApiKey:
    secret = SECRET_KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        project=project,
        name=name,
        public_key=PUBLIC_KEY_PREFIX + secrets.token_hex(12),
        secret_hash=secret_hash(secret),
        secret_hint=secret[: len(SECRET_KEY_PREFIX) + 4],
        created_by=created_by,
    )
    audit_event_record(kind=AuditEvent.Kind.API_KEY_CREATED, project=project, user=created_by, address=address,
                       detail={"public_key": api_key.public_key, "name": name})
    return IssuedApiKey(api_key=api_key, secret=secret)


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey, revoked_by: AbstractBaseUser | None = None,
                   address: str | None = None) -> ApiKey:
    revoked = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db()
    if revoked:  # revoking twice is no second event
        audit_event_record(kind=AuditEvent.Kind.API_KEY_REVOKED, project=api_key.project, user=revoked_by,
                           address=address, detail={"public_key": api_key.public_key, "name": api_key.name})
    return api_key


def api_key_touch(*, api_key: ApiKey) -> None:
    """Record use at most once a minute: a write per ingestion request would contend on one row."""
    now = timezone.now()
    if api_key.last_used_at is None or (now - api_key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now


def _login_account(username: str) -> str:
    # What AuthenticationForm authenticates with (NFKC, stripped), case-folded so that case does not buy more tries.
    return unicodedata.normalize("NFKC", username or "").strip().lower()


def _throttled(exc: AuthThrottledError, *, kind: str, address: str, project: Project | None = None,
               user: AbstractBaseUser | None = None, detail: dict[str, Any]) -> None:
    """Log and record the first refusal of a window; later ones of the same window only at debug level."""
    line = "%s throttled (per %s) from %s for %s s%s"
    about = "".join(f", {name} {value}" for name, value in detail.items())
    args = (kind.removesuffix("_throttled"), exc.scope, address or "?", exc.retry_after, about)
    if not exc.first_in_window:
        auth_logger.debug(line, *args)
        return
    auth_logger.warning(line, *args)
    if project is not None or user is not None:  # an event nobody could be shown stays a log line
        audit_event_record(kind=kind, project=project, user=user, address=address,
                           detail={**detail, "per": exc.scope, "retry_after": exc.retry_after})


def login_attempt_check(*, username: str, address: str) -> None:
    """Raise AuthThrottledError (429) while logins of this account or from this address are throttled."""
    try:
        auth_throttle.auth_throttle_check(realm=auth_throttle.LOGIN, account=_login_account(username), address=address)
    except AuthThrottledError as exc:
        user = user_get_by_login(username=_login_account(username))
        _throttled(exc, kind=AuditEvent.Kind.LOGIN_THROTTLED, address=address, user=user,
                   detail={"username": user.get_username()} if user else {})
        raise


def login_failure_record(*, username: str, address: str) -> None:
    """A wrong password (or an unknown or inactive account): counted, logged, and recorded if the account exists.
    Raises AuthThrottledError (429) when it was counted past the limit (concurrent attempts)."""
    count = auth_throttle.auth_failure_add(realm=auth_throttle.LOGIN, account=_login_account(username),
                                           address=address)
    user = user_get_by_login(username=_login_account(username))
    # The typed name is logged only when it is an account: people type their password into the wrong field.
    auth_logger.info("login failed from %s for %s (failure %s in this window)", address or "?",
                     user.get_username() if user else "an unknown account", count)
    if user is not None:
        audit_event_record(kind=AuditEvent.Kind.LOGIN_FAILED, user=user, address=address,
                           detail={"username": user.get_username()})
    if auth_throttle.auth_failure_over_limit(count=count):
        login_attempt_check(username=username, address=address)


def login_success_record(*, user: AbstractBaseUser, address: str) -> None:
    auth_throttle.auth_failures_forget(realm=auth_throttle.LOGIN, account=_login_account(user.get_username()),
                                       address=address)
    audit_event_record(kind=AuditEvent.Kind.LOGIN, user=user, address=address,
                       detail={"username": user.get_username()})


def api_key_attempt_check(*, public_key: str | None, address: str) -> None:
    """Raise AuthThrottledError (429) while API keys from this address (or this public key from it) are throttled."""
    try:
        auth_throttle.auth_throttle_check(realm=auth_throttle.API_KEY, account=public_key, address=address)
    except AuthThrottledError as exc:
        api_key = api_key_get_by_public_key(public_key=public_key) if public_key else None
        _throttled(exc, kind=AuditEvent.Kind.API_KEY_THROTTLED, address=address,
                   project=api_key.project if api_key else None,
                   detail={"public_key": api_key.public_key} if api_key else {})
        raise


def api_key_failure_record(*, public_key: str | None, address: str) -> None:
    """A secret no project has (or one sent with another pair's public key): counted, logged, and recorded in the
    project of the public key if one was sent. Raises AuthThrottledError (429) when it was counted past the limit
    (concurrent attempts)."""
    count = auth_throttle.auth_failure_add(realm=auth_throttle.API_KEY, account=public_key, address=address)
    api_key = api_key_get_by_public_key(public_key=public_key) if public_key else None
    # Like a typed username, a public key is logged only when it exists: anything else is the client's free text.
    auth_logger.info("API key refused from %s (public key %s; failure %s in this window)", address or "?",
                     api_key.public_key if api_key else "unknown" if public_key else "not sent", count)
    if api_key is not None:
        audit_event_record(kind=AuditEvent.Kind.API_KEY_FAILED, project=api_key.project, address=address,
                           detail={"public_key": public_key})
    if auth_throttle.auth_failure_over_limit(count=count):
        api_key_attempt_check(public_key=public_key, address=address)


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
