"""Reads of the ingestion health counters (services/ingest_issues.py), scoped to a project."""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Sum
from django.utils import timezone

from clear.projects.models import Project
from traces.models import IngestIssueCount

# What each counted reason means, for the Settings page; a reason missing here (a new repair) is shown as it is.
REASON_TEXT = {
    "truncated": "A bounded field (name, model, tool, node, release…) was longer than Clear stores; it was cut and "
                 "its original length recorded.",
    "nul_removed": "The text held NUL characters, which the database cannot store; they were removed.",
    "lone_surrogate_replaced": "The text was cut inside a UTF-16 pair (usually a truncated emoji); the broken half "
                               "became U+FFFD.",
    "nested_too_deep": "A value nested deeper than Clear walks was kept as its JSON text.",
    "invalid_timestamp": "The span's start time was missing, not a number or out of range, with no end time to put "
                         "it at.",
    "invalid_trace_id": "The traceId was missing, all zeros or not 16 bytes (32 hex digits).",
    "invalid_span_id": "The spanId was missing, all zeros or not 8 bytes (16 hex digits).",
    "invalid_parent_span_id": "The parentSpanId was not 8 bytes (16 hex digits).",
    "undecodable_span": "The span's protobuf bytes could not be decoded.",
    "invalid_langfuse_event": "A Langfuse event was not a valid event (no body, unknown type, missing id).",
    "unreadable_span": "The span could not be read for another reason (see the export's partialSuccess message).",
}


@dataclass(frozen=True)
class IngestIssueRow:
    kind: str
    reason: str
    count: int
    meaning: str


def ingest_issue_summary(*, project: Project, days: int = 14) -> list[IngestIssueRow]:
    """Repaired and rejected spans of the last `days` days (UTC, today included) by kind and reason, most first."""
    since = timezone.now().date() - timedelta(days=days - 1)
    rows = (IngestIssueCount.objects.filter(project=project, day__gte=since).values("kind", "reason")
            .annotate(total=Sum("count")).order_by("kind", "-total", "reason"))
    return [IngestIssueRow(kind=row["kind"], reason=row["reason"], count=row["total"],
                           meaning=REASON_TEXT.get(row["reason"], row["reason"].replace("_", " ")))
            for row in rows]
