from datetime import UTC, datetime

from django.db import models
from django.db.models import F
from django.db.models.functions import Coalesce

from clear.projects.models import Project


def utc_today():
    """The UTC date now: a trace's first-received day, the span table's partition key (services/partitions.py)."""
    return datetime.now(UTC).date()


class Trace(models.Model):
    """A trace's summary, derived from its spans (see services.trace_finalize); spans are the source of truth."""

    class Outcome(models.TextChoices):
        SUCCESS = "success", "Success"
        FAILURE = "failure", "Failure"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="traces")
    trace_id = models.CharField(max_length=32)
    name = models.CharField(max_length=500, blank=True)
    root_span_id = models.CharField(max_length=16, blank=True)
    start_time = models.DateTimeField(null=True, blank=True)
    end_time = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, default="unset")
    span_count = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    # Spans stored with repairs (metadata clear.repairs), counted at ingestion so the list shows a badge without
    # reading span metadata.
    repaired_spans = models.PositiveIntegerField(default=0)
    # Spans of this trace refused at ingestion (their ids were usable, something else was not): the trace is shown
    # with a "N spans rejected" badge, since what it shows is incomplete.
    rejected_spans = models.PositiveIntegerField(default=0)
    # When diagnosis last started judging this trace, and when a resend last changed a stored span's content;
    # content_changed_at > judged_at is "changed since judged": the next run, continuous mode included, judges it again.
    judged_at = models.DateTimeField(null=True, blank=True)
    content_changed_at = models.DateTimeField(null=True, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(null=True, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, null=True, blank=True)
    score = models.FloatField(null=True, blank=True)
    outcome_source = models.CharField(max_length=20, blank=True, help_text="root span, langfuse score or api")
    task_id = models.CharField(max_length=200, blank=True)
    release = models.CharField(max_length=200, blank=True)
    environment = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    user_id = models.CharField(max_length=200, blank=True)
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    first_received_at = models.DateTimeField(auto_now_add=True)
    # first_received_at's UTC day, copied to every span of the trace as Span.trace_day: the partition key on
    # Postgres, the same for every span, so a trace never splits across partitions.
    first_received_day = models.DateField(default=utc_today)
    last_received_at = models.DateTimeField(auto_now_add=True)
    finalized_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "trace_id"], name="trace_unique_per_project")]
        indexes = [
            models.Index(fields=["project", "-start_time"], name="trace_project_start"),
            # (release, first receipt) also answers "the newest release" with one probe per release.
            models.Index(fields=["project", "release", "first_received_at"], name="trace_project_release_first"),
            models.Index(fields=["project", "last_received_at"], name="trace_project_received"),
            # Retention's whole-day span partitions: which traces a day holds.
            models.Index(fields=["first_received_day"], name="trace_received_day"),
            # The orders the lists page by: the UI's (start time, nulls last) and the API's (start time, else
            # first receipt); without them the first page is a sort of every trace of the project. Postgres only
            # (migration 0002): SQLite refuses NULLS LAST in an index.
            models.Index(F("project"), F("start_time").desc(nulls_last=True), F("id").desc(),
                         name="trace_project_start_list"),
            models.Index(F("project"), Coalesce("start_time", "first_received_at").desc(), F("id").desc(),
                         name="trace_project_sort_time"),
        ]

    def __str__(self) -> str:
        return self.trace_id

    @property
    def changed_since_judged(self) -> bool:
        return bool(self.judged_at and self.content_changed_at and self.content_changed_at > self.judged_at)


class Span(models.Model):
    class Kind(models.TextChoices):
        AGENT = "AGENT"
        LLM = "LLM"
        TOOL = "TOOL"
        CHAIN = "CHAIN"
        RETRIEVER = "RETRIEVER"
        EMBEDDING = "EMBEDDING"
        GUARDRAIL = "GUARDRAIL"
        EVALUATOR = "EVALUATOR"
        EVENT = "EVENT"
        SPAN = "SPAN"

    # No single-column indexes: span_project_node and the unique key (trace, ...) lead with these columns, and
    # each index is written by every span of the ingest path.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="spans", db_index=False)
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    name = models.CharField(max_length=500)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.SPAN)
    node = models.CharField(max_length=300, blank=True)
    # True when the node came from the span's own name or tool (no AGENT ancestor known yet); finalisation
    # re-resolves these once late parents have arrived.
    node_inferred = models.BooleanField(default=False)
    node_fallback = models.CharField(max_length=300, blank=True)
    agent_name = models.CharField(max_length=300, blank=True)
    tool_name = models.CharField(max_length=300, blank=True)
    model = models.CharField(max_length=300, blank=True)
    input = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=10, default="unset")
    status_message = models.TextField(blank=True)
    start_time = models.DateTimeField()
    end_time = models.DateTimeField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cached_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)  # part of output_tokens (MAPPING.md)
    usage_is_aggregate = models.BooleanField(default=False)
    cost = models.FloatField(null=True, blank=True)
    release = models.CharField(max_length=200, blank=True)
    environment = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    user_id = models.CharField(max_length=200, blank=True)
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    resource = models.JSONField(default=dict, blank=True)
    scope = models.CharField(max_length=300, blank=True)
    events = models.JSONField(default=list, blank=True)
    exceptions = models.JSONField(default=list, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    # The trace's first_received_day: the partition key on Postgres (daily range partitions, see
    # traces/services/partitions.py). Every span query that knows its traces filters on it, so partitions are pruned.
    trace_day = models.DateField()

    class Meta:
        constraints = [
            # Idempotency on (project, trace id, span id); trace_day is the same for every span of a trace, and a
            # partitioned table's unique keys must hold the partition key, as a distributed one (Citus) must hold
            # project. Trace and span id lead: a fresh day's partition has no statistics yet, and with project
            # first the planner scanned the project's rows instead of probing (trace, span id).
            models.UniqueConstraint(fields=["trace", "span_id", "trace_day", "project"], name="span_unique_per_trace")
        ]
        indexes = [
            models.Index(fields=["trace", "start_time"], name="span_trace_start"),
            models.Index(fields=["project", "node"], name="span_project_node"),
        ]

    @property
    def duration_ms(self) -> float | None:
        if self.end_time is None:
            return None
        return (self.end_time - self.start_time).total_seconds() * 1000


class Score(models.Model):
    """A score sent with a trace (e.g. a Langfuse score); the one named by CLEAR_OUTCOME_SCORE_NAME sets the outcome."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="scores")
    span_id = models.CharField(max_length=16, blank=True)
    external_id = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200)
    value = models.FloatField(null=True, blank=True)
    string_value = models.TextField(blank=True)
    comment = models.TextField(blank=True)
    source = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "external_id"], condition=~models.Q(external_id=""), name="score_unique_external_id"
            )
        ]


class IngestIssueCount(models.Model):
    """Spans repaired or rejected per project, day (UTC) and reason: rejected spans are not stored, so Settings'
    ingestion health can only count them here."""

    class Kind(models.TextChoices):
        REPAIRED = "repaired", "Repaired"
        REJECTED = "rejected", "Rejected"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    reason = models.CharField(max_length=100)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "day", "kind", "reason"], name="ingest_issue_unique_day"),
        ]


class ExpiredTrace(models.Model):
    """A trace removed by retention, not by a user: its id stays so that links to it (evidence, tickets, exports)
    say it expired, and when, instead of answering "no such trace"."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)
    expired_at = models.DateTimeField()
    retention_days = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "trace_id"], name="expired_trace_unique")]
