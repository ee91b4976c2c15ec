"""Reads for retention (traces/services/lifecycle.py): how long a project keeps traces, and which are past it."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from clear.projects.models import Project
from traces.models import Trace


def retention_days_effective(*, project: Project) -> int | None:
    """Days the project keeps traces: its own setting, else CLEAR_RETENTION_DAYS; None (or 0 on the project) keeps
    them forever."""
    days = project.retention_days if project.retention_days is not None else settings.CLEAR_RETENTION_DAYS
    return days if days and days > 0 else None


def traces_expired(*, project: Project, now: datetime | None = None) -> QuerySet[Trace] | None:
    """The project's traces past its retention (by the trace's start, or its arrival when it has no spans); None
    when it keeps traces forever."""
    days = retention_days_effective(project=project)
    if days is None:
        return None
    cutoff = (now or timezone.now()) - timedelta(days=days)
    return Trace.objects.filter(project=project, first_received_at__lt=cutoff).exclude(start_time__gte=cutoff)
