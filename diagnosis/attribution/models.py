"""One attribution per (trace, method): the responsible node, the decisive span and step, and how sure we are."""

from django.db import models
from django.db.models import Q

from clear.projects.models import Project
from traces.models import Trace


class Attribution(models.Model):
    class Method(models.TextChoices):
        LEARNED = "learned", "Learned (offline, nested cross-validation)"
        HEURISTIC = "heuristic", "Heuristic (offline)"
        ALL_AT_ONCE = "all_at_once", "LLM: all at once"
        STEP_BY_STEP = "step_by_step", "LLM: step by step"
        BINARY_SEARCH = "binary_search", "LLM: binary search"

    class Status(models.TextChoices):
        OK = "ok", "OK"
        INCONCLUSIVE = "inconclusive", "Inconclusive"  # the method ran but named no step (e.g. no "yes" at all)
        ERROR = "error", "Error"  # the method failed (provider error, invalid output after one repair)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="attributions")
    method = models.CharField(max_length=20, choices=Method.choices, default=Method.HEURISTIC)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OK)
    # The responsible node (agent name); blank unless status is ok.
    agent = models.CharField(max_length=300, blank=True)
    # The decisive span: also the link to insights, whose evidence cites span ids (see selectors).
    span_id = models.CharField(max_length=16, blank=True)
    # `agent.step_index` of that span when it has one, else its position among the trace's steps (0-based).
    step_index = models.IntegerField(null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    model = models.CharField(max_length=300, blank=True)
    prompt_version = models.CharField(max_length=100, blank=True)
    calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    # Method-specific extras: candidate scores and signals (heuristic), the search path (binary search), ...
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["trace", "method"], name="attribution_unique_trace_method"),
            models.CheckConstraint(condition=Q(confidence__isnull=True) | (Q(confidence__gte=0) & Q(confidence__lte=1)),
                                   name="attribution_confidence_range"),
        ]
        indexes = [
            models.Index(fields=["project", "method", "agent"], name="attribution_project_agent"),
            models.Index(fields=["project", "span_id"], name="attribution_project_span"),
        ]

    def __str__(self) -> str:
        return f"{self.method}: {self.agent or self.status} @ {self.step_index}"
