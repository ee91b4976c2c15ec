import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Project(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")]


class ApiKey(models.Model):
    """A project key pair. Only a SHA-256 of the secret is kept: secrets are random, so a slow hash buys nothing."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    public_key = models.CharField(max_length=64, unique=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    secret_hint = models.CharField(max_length=32, help_text="The secret's first characters, to tell keys apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class WorkerProbe(models.Model):
    """A round trip through the task queue: proves a worker is alive and lets tests observe redelivery."""

    token = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0)
    worker_hostname = models.CharField(max_length=255, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)


class AuditEvent(models.Model):
    """Who did what to access, from which address. Account events (logins) have no project: a project shows those of
    its members (clear.projects.selectors.audit_event_list)."""

    class Kind(models.TextChoices):
        LOGIN = "login", "Logged in"
        LOGIN_FAILED = "login_failed", "Failed login"
        LOGIN_THROTTLED = "login_throttled", "Logins throttled"
        API_KEY_CREATED = "api_key_created", "API key created"
        API_KEY_REVOKED = "api_key_revoked", "API key revoked"
        API_KEY_FAILED = "api_key_failed", "Wrong API secret"
        API_KEY_THROTTLED = "api_key_throttled", "API keys throttled"
        RETENTION_CHANGED = "retention_changed", "Data retention changed"

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_events")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="audit_events")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    address = models.GenericIPAddressField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["project", "-created_at"], name="audit_project_created"),
            models.Index(fields=["user", "-created_at"], name="audit_user_created"),
        ]
