"""Insights: recurring failure patterns clustered from the judges' feedback, their links, statements, per-run
occurrences, evidence and history."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from clear.projects.models import Project
from diagnosis.models.runs import DiagnosisRun, Feedback
from traces.models import Trace


class Insight(models.Model):
    """A recurring failure pattern clustered from judges' feedback, at one node or system-wide. Its identity is kept
    across runs (centroid, then fingerprint); `is_other` marks the bucket of statements that fit no cluster."""

    class Level(models.TextChoices):
        NODE = "node", "Node"
        SYSTEM = "system", "System"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        ACKNOWLEDGED = "acknowledged", "Acknowledged"
        FIXED = "fixed", "Fixed"
        IGNORED = "ignored", "Ignored"

    class Review(models.TextChoices):
        UNREVIEWED = "unreviewed", "Unreviewed"
        CONFIRMED = "confirmed", "Confirmed"
        REJECTED = "rejected", "Rejected"

    class Severity(models.TextChoices):
        LOW = "low", "Low"
        MEDIUM = "medium", "Medium"
        HIGH = "high", "High"
        CRITICAL = "critical", "Critical"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="insights")
    level = models.CharField(max_length=10, choices=Level.choices)
    node = models.CharField(max_length=300, blank=True)
    is_other = models.BooleanField(default=False)
    title = models.CharField(max_length=300)
    description = models.TextField(blank=True)
    root_cause = models.TextField(blank=True)
    recommendation = models.TextField(blank=True)
    naming_source = models.CharField(max_length=10, default="offline")
    naming_note = models.TextField(blank=True, help_text="why the model's title and text were replaced by the computed "
                                                         "ones (they echoed the prompt or were not grounded), else empty")
    terms = models.JSONField(default=list, blank=True)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.MEDIUM)
    # Figures of the latest run the pattern occurred in (per-run figures: InsightOccurrence).
    count = models.PositiveIntegerField(default=0, help_text="statements")
    trace_count = models.PositiveIntegerField(default=0)
    frequency = models.FloatField(default=0.0, help_text="share of the run's judged traces")
    frequency_low = models.FloatField(null=True, blank=True)
    frequency_high = models.FloatField(null=True, blank=True)
    affected_nodes = models.JSONField(default=dict, blank=True, help_text="{node: statements}")
    lift = models.FloatField(null=True, blank=True)
    lift_low = models.FloatField(null=True, blank=True)
    lift_high = models.FloatField(null=True, blank=True)
    by_design = models.BooleanField(default=False, help_text="an output property its step shows on every call, in "
                                                             "succeeding and failing runs alike")
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    first_run = models.ForeignKey(DiagnosisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_run = models.ForeignKey(DiagnosisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    trend = models.JSONField(default=list, blank=True, help_text="[{release, count, judged, frequency}]")
    status = models.CharField(max_length=15, choices=Status.choices, default=Status.OPEN)
    review = models.CharField(max_length=12, choices=Review.choices, default=Review.UNREVIEWED)
    reviewed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(blank=True)
    reopened_at = models.DateTimeField(null=True, blank=True)
    reopen_count = models.PositiveIntegerField(default=0)
    # The release it came back in (insights/regressed.py), "" when it has not come back since it was absent or fixed.
    regressed_in_release = models.CharField(max_length=100, blank=True)
    regressed_at = models.DateTimeField(null=True, blank=True)
    merged_into = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="merged_from")
    split_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="split_into")
    fingerprint = models.CharField(max_length=40, blank=True)
    centroid = models.BinaryField(null=True, blank=True)
    embedding_model = models.CharField(max_length=300, blank=True)
    nodes = models.ManyToManyField("self", through="InsightLink", through_fields=("system", "node"),
                                   symmetrical=False, related_name="systems", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    @property
    def failure_association(self) -> str:
        """"associated": traces with the pattern fail more often than traces without it (the lift interval lies
        above 1); "not_associated": the interval includes 1 or lies below it, so it shows in successes alike, or
        the pattern is by-design behaviour (`by_design`: a lift above 1 then only says that failing runs take that
        step more often); "unknown": no lift, because fewer than 10 judged traces succeeded (clustering/stats.py
        MIN_SUCCEEDING; none had a recorded outcome, or the set holds failed runs only)."""
        if self.by_design:
            return "not_associated"
        if self.lift is None or self.lift_low is None:
            return "unknown"
        return "associated" if self.lift_low > 1 else "not_associated"

    @property
    def failure_inconclusive(self) -> bool:
        """Not associated only for want of traces: failing traces show the pattern more often (lift above 1) but the
        interval still includes 1. With one run per task (about 50 runs) most real patterns of a few runs are here;
        such an insight is a candidate, ticketed and marked so (diagnosis/tickets/TICKETS.md)."""
        return (not self.by_design and self.lift is not None and self.lift_low is not None
                and self.lift > 1 >= self.lift_low)

    class Meta:
        ordering = ["-last_seen", "-frequency", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["project", "level", "node"], condition=Q(is_other=True),
                                    name="insight_one_other_bucket"),
        ]
        indexes = [
            models.Index(fields=["project", "level", "node"], name="insight_project_level_node"),
            models.Index(fields=["project", "status"], name="insight_project_status"),
        ]

    def __str__(self) -> str:
        return self.title


class InsightLink(models.Model):
    """A node-level insight contained in a system-level one: `shared` of its statements in the latest run that
    linked them, `share` of the node insight's statements there."""

    system = models.ForeignKey(Insight, on_delete=models.CASCADE, related_name="node_links")
    node = models.ForeignKey(Insight, on_delete=models.CASCADE, related_name="system_links")
    shared = models.PositiveIntegerField(default=0)
    share = models.FloatField(default=0.0)
    run = models.ForeignKey(DiagnosisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["system", "node"], name="insight_link_unique")]


class InsightStatement(models.Model):
    """One atomic issue statement of a run's feedback and the insights (node level, system level) it belongs to."""

    class Kind(models.TextChoices):
        ISSUE = "issue", "Judge issue (title and detail)"
        CRITIQUE = "critique", "Sentence of a critique"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="insight_statements")
    feedback = models.ForeignKey(Feedback, on_delete=models.CASCADE, related_name="statements")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    text = models.TextField()
    node = models.CharField(max_length=300, blank=True)
    span_id = models.CharField(max_length=16, blank=True)
    judge = models.CharField(max_length=200)
    severity = models.CharField(max_length=10, default="medium")
    evidence = models.JSONField(default=list, blank=True, help_text="[{span_id, quote}] as the judge cited it")
    vector_key = models.CharField(max_length=64, blank=True, help_text="EmbeddingCache key of its canonical text")
    node_insight = models.ForeignKey(Insight, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="node_statements")
    system_insight = models.ForeignKey(Insight, null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="system_statements")
    excluded = models.BooleanField(default=False, help_text="its feedback was marked wrong")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["feedback", "position"], name="insight_statement_unique")]
        indexes = [models.Index(fields=["run", "node"], name="insight_statement_run_node")]


class InsightOccurrence(models.Model):
    """An insight in one run: statements, traces, frequency over the run's judged traces, lift, traces by release."""

    insight = models.ForeignKey(Insight, on_delete=models.CASCADE, related_name="occurrences")
    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="insight_occurrences")
    count = models.PositiveIntegerField(default=0)
    trace_count = models.PositiveIntegerField(default=0)
    judged = models.PositiveIntegerField(default=0)
    frequency = models.FloatField(default=0.0)
    lift = models.FloatField(null=True, blank=True)
    lift_low = models.FloatField(null=True, blank=True)
    lift_high = models.FloatField(null=True, blank=True)
    trace_ids = models.JSONField(default=list, blank=True)
    releases = models.JSONField(default=dict, blank=True, help_text="{release: traces with the insight}")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["insight", "run"], name="insight_occurrence_unique")]


class InsightEvidence(models.Model):
    """A verified citation for an insight: the span (and quote, "" for a bare citation) a judge's statement cites."""

    insight = models.ForeignKey(Insight, on_delete=models.CASCADE, related_name="evidence")
    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="+")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="+")
    span_id = models.CharField(max_length=16)
    feedback = models.ForeignKey(Feedback, on_delete=models.CASCADE, related_name="+")
    statement = models.ForeignKey(InsightStatement, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="evidence_rows")
    statement_text = models.TextField()
    quote = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["insight", "run"], name="insight_evidence_run")]


class InsightEvent(models.Model):
    """The history of an insight: created, matched by a run, reopened, reviewed, status set, merged, split."""

    insight = models.ForeignKey(Insight, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20)
    run = models.ForeignKey(DiagnosisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
