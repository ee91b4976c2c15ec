"""Daily counts of repaired and rejected spans per project and reason (issue 24): Settings' ingestion health; and
the rejected spans of each stored trace, for its "rejected" badge.

One upsert statement per request for all its reasons, and no query at all when nothing was repaired or rejected:
ingestion speed matters more than these figures.
"""

from collections import Counter
from collections.abc import Iterable
from datetime import date

from django.db import connection
from django.db.models import F
from django.utils import timezone

from clear.projects.models import Project
from traces.models import IngestIssueCount, Trace
from traces.normalize import SpanRejection

REASON_MAX = IngestIssueCount._meta.get_field("reason").max_length


def trace_rejections_count(*, project: Project, rejections: Iterable[SpanRejection]) -> None:
    """Add rejected spans to the rejected_spans of the stored traces they name; one UPDATE per distinct count.

    A trace without a row gets none: a badge on a trace that holds nothing would only hide the rejection (the
    project's counters keep it). Rejected spans are not stored, so a resent rejection counts again; exporters do not
    resend a request that was answered 200."""
    per_trace: Counter = Counter(r.trace_id for r in rejections if r.trace_id)
    by_count: dict[int, list[str]] = {}
    for trace_id, count in per_trace.items():
        by_count.setdefault(count, []).append(trace_id)
    for count, trace_ids in by_count.items():
        Trace.objects.filter(project=project, trace_id__in=trace_ids).update(
            rejected_spans=F("rejected_spans") + count)


def repair_reasons(repaired: Iterable[tuple[object, list[dict]]]) -> Counter:
    """Repaired spans per reason: a span with two repairs of one reason counts once for it."""
    counts: Counter = Counter()
    for _record, repairs in repaired:
        counts.update({str(r.get("reason") or "repaired")[:REASON_MAX] for r in repairs})
    return counts


def ingest_issues_count(*, project: Project, repaired: Counter | None = None,
                        rejected: Counter | None = None) -> None:
    """Add a request's repaired and rejected spans (per reason) to today's counters of the project."""
    rows = [(kind, reason[:REASON_MAX], count)
            for kind, counts in ((IngestIssueCount.Kind.REPAIRED, repaired), (IngestIssueCount.Kind.REJECTED, rejected))
            for reason, count in (counts or {}).items() if count > 0]
    if rows:
        _counters_add(project=project, day=timezone.now().date(), rows=rows)


def _counters_add(*, project: Project, day: date, rows: list[tuple[str, str, int]]) -> None:
    """One statement for every reason of the request: INSERT ... ON CONFLICT DO UPDATE adds to an existing row.
    Postgres and SQLite (3.24+) both read this form; the ORM cannot add on conflict (bulk_create only replaces)."""
    opts = IngestIssueCount._meta
    quote = connection.ops.quote_name
    columns = [opts.get_field(name) for name in ("project", "day", "kind", "reason", "count")]
    project_id = columns[0].get_db_prep_value(project.pk, connection)
    day_value = columns[1].get_db_prep_value(day, connection)
    names = ", ".join(quote(field.column) for field in columns)
    count = quote("count")
    merge = _rows_merged(rows)
    sql = (f"INSERT INTO {quote(opts.db_table)} ({names}) VALUES {', '.join(['(%s, %s, %s, %s, %s)'] * len(merge))} "
           f"ON CONFLICT ({', '.join(quote(f.column) for f in columns[:4])}) "
           f"DO UPDATE SET {count} = {quote(opts.db_table)}.{count} + excluded.{count}")
    params = [value for kind, reason, n in merge for value in (project_id, day_value, kind, reason, n)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _rows_merged(rows: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """One row per (kind, reason): Postgres refuses to update one row twice in a statement."""
    merged: Counter = Counter()
    for kind, reason, count in rows:
        merged[(kind, reason)] += count
    return [(kind, reason, count) for (kind, reason), count in merged.items()]
