"""Tickets (one per insight fingerprint) and the per-project connection to a GitHub-compatible issue tracker."""

from django.db import models
from django.db.models import Q

from clear.projects.models import Project
from diagnosis.models import Insight


class Ticket(models.Model):
    """A bug report made from an insight. The fingerprint is the ticket's identity (unique per project, embedded
    in the pushed issue's body); the insight link follows the insight when its own fingerprint drifts later."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        IN_PROGRESS = "in_progress", "In progress"
        FIXED = "fixed", "Fixed"
        WONT_FIX = "wont_fix", "Won't fix"

    CLOSED = (Status.FIXED, Status.WONT_FIX)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tickets")
    insight = models.ForeignKey(Insight, null=True, blank=True, on_delete=models.SET_NULL, related_name="tickets")
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(max_length=15, choices=Status.choices, default=Status.OPEN)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True, help_text="Markdown; trace content in it is escaped")

    # Copied from the insight at each sync, so lists and exports need no joins and survive the insight's deletion.
    level = models.CharField(max_length=10, blank=True)
    node = models.CharField(max_length=300, blank=True)
    severity = models.CharField(max_length=10, blank=True)
    description = models.TextField(blank=True)
    root_cause = models.TextField(blank=True)
    recommendation = models.TextField(blank=True)
    frequency = models.FloatField(default=0.0)
    trace_count = models.PositiveIntegerField(default=0)
    lift = models.FloatField(null=True, blank=True)
    lift_low = models.FloatField(null=True, blank=True)
    lift_high = models.FloatField(null=True, blank=True)
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    evidence = models.JSONField(default=list, blank=True,
                                help_text="[{trace_id, task_id, release, span_id, quote, statement}]")
    traces = models.JSONField(default=list, blank=True, help_text="[{trace_id, task_id, release, outcome}]")
    trace_total = models.PositiveIntegerField(default=0, help_text="affected traces, of which `traces` lists some")
    statement_count = models.PositiveIntegerField(default=0, help_text="judges' statements of the pattern")
    judged_count = models.PositiveIntegerField(default=0, help_text="judged traces of the run the figures come from")
    nodes = models.JSONField(default=list, blank=True,
                             help_text="[{node, statements, insight_id, title}]: a system ticket's nodes")
    releases = models.JSONField(default=dict, blank=True, help_text="{release: traces with the pattern}")
    failure_association = models.CharField(max_length=16, blank=True, help_text="as Insight.failure_association")
    suggested_fix = models.JSONField(default=dict, blank=True,
                                     help_text="{text, source, trace_id, span_id}: see diagnosis/tickets/fix.py")
    # A wont_fix ticket that points to another: its insight was merged into that one's, or (a node ticket pointing
    # to a system ticket) the problem is tracked at system level, where it spans nodes.
    merged_into = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    # The issue on the tracker, once pushed.
    external_number = models.PositiveIntegerField(null=True, blank=True)
    external_url = models.URLField(max_length=500, blank=True)
    pushed_hash = models.CharField(max_length=64, blank=True, help_text="sha256 of the title, body and state pushed")
    pushed_at = models.DateTimeField(null=True, blank=True)
    push_error = models.TextField(blank=True)

    status_changed_at = models.DateTimeField(null=True, blank=True)
    reopen_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "fingerprint"], name="ticket_unique_fingerprint"),
            models.CheckConstraint(condition=Q(status__in=["open", "in_progress", "fixed", "wont_fix"]),
                                   name="ticket_status_valid"),
        ]
        indexes = [models.Index(fields=["project", "status"], name="ticket_project_status")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    @property
    def is_closed(self) -> bool:
        return self.status in self.CLOSED

    @property
    def candidate(self) -> bool:
        """Made from an inconclusive insight (Insight.failure_inconclusive): not yet shown to go with failure."""
        return self.insight_id is not None and self.insight.failure_inconclusive


class IssueTrackerConnection(models.Model):
    """Where a project's tickets are pushed: a GitHub-compatible REST API (github.com or Enterprise, Gitea)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="issue_tracker")
    base_url = models.URLField(max_length=500, default="https://api.github.com")
    repository = models.CharField(max_length=300, help_text="owner/name")
    # Kept readable: every push authenticates with it. The API shows only its last characters.
    token = models.CharField(max_length=500)
    enabled = models.BooleanField(default=True)
    push_started_at = models.DateTimeField(null=True, blank=True, help_text="a push holds this lease while running")
    last_push_at = models.DateTimeField(null=True, blank=True)
    last_push_summary = models.JSONField(default=dict, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.repository} at {self.base_url}"

    @property
    def token_hint(self) -> str:
        return f"…{self.token[-4:]}" if len(self.token) >= 12 else "…"
