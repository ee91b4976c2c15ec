"""Reads for retention (traces/services/lifecycle.py): how long a project keeps traces, and which are past it."""

from datetime import UTC, date, datetime, timedelta

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


def span_partitions_expired(*, now: datetime | None = None) -> list[date]:
    """The days whose span partition retention can drop whole (Postgres): older than the longest retention of any
    project, with no trace that started since (a trace's start keeps it, see traces_expired). Empty when a project
    keeps traces forever."""
    from traces.services.partitions import span_partition_days

    days = span_partition_days()
    if not days:
        return []
    retentions = [retention_days_effective(project=project) for project in Project.objects.all()]
    if not retentions or None in retentions:
        return []
    oldest_kept = (now or timezone.now()) - timedelta(days=max(retentions))
    cutoff = oldest_kept.astimezone(UTC).date()
    candidates = [day for day in days if day < cutoff]
    if not candidates:
        return []
    started_since = set(Trace.objects.filter(first_received_day__in=candidates, start_time__gte=oldest_kept)
                        .values_list("first_received_day", flat=True).distinct())
    return [day for day in candidates if day not in started_since]


def project_disk_use(*, project: Project) -> dict:
    """An estimate of the disk the project's traces take: the trace and span tables' size (with their indexes and
    TOAST on Postgres; the database file on SQLite) times the project's share of the spans. {"bytes", "total_bytes",
    "spans", "share"}; bytes is None where the database cannot say."""
    from django.db import connection
    from django.db.models import Sum

    from traces.models import Span

    mine = Trace.objects.filter(project=project).aggregate(n=Sum("span_count"))["n"] or 0
    everyone = Trace.objects.aggregate(n=Sum("span_count"))["n"] or 0
    total = None
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A partitioned table's own size is 0: its partitions hold the rows.
            cursor.execute("SELECT pg_total_relation_size(%s::regclass) + pg_total_relation_size(%s::regclass) "
                           "+ (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
                           "WHERE inhparent = %s::regclass)",
                           [Span._meta.db_table, Trace._meta.db_table, Span._meta.db_table])
            total = int(cursor.fetchone()[0])
        elif connection.vendor == "sqlite":
            cursor.execute("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
            total = int(cursor.fetchone()[0])
    share = mine / everyone if everyone else 0.0
    return {"bytes": None if total is None else int(total * share), "total_bytes": total, "spans": mine,
            "share": share}
