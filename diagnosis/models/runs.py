"""Diagnosis runs over a set of traces, the feedback judges leave on traces and spans, rubrics, the judge and
embedding caches."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from clear.projects.models import Project
from traces.models import Trace


def all_rubrics() -> str:
    return "all"


class DiagnosisRun(models.Model):
    """Judges applied to a set of traces chosen by a filter; progress and spend are counted on this row."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        BUDGET_EXHAUSTED = "budget_exhausted", "Budget exhausted"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="diagnosis_runs")
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    # Continuous runs collect the traces judged as they complete, one run per project and UTC day (continuous_key).
    continuous = models.BooleanField(default=False)
    continuous_key = models.CharField(max_length=40, blank=True)

    class Purpose(models.TextChoices):
        DIAGNOSIS = "diagnosis", "Diagnosis"
        GATE = "gate", "CI gate"

    # A gate's runs (clearctl gate: the release under test and its baseline) exist for the comparison; they never
    # set an insight's headline figures while a full diagnosis run can (diagnosis/insights/headline.py).
    purpose = models.CharField(max_length=20, choices=Purpose.choices, default=Purpose.DIAGNOSIS)

    # The filter that chose the traces.
    release = models.CharField(max_length=200, blank=True)
    since = models.DateTimeField(null=True, blank=True)
    until = models.DateTimeField(null=True, blank=True)
    tags = models.JSONField(default=list, blank=True)
    outcome = models.CharField(max_length=10, blank=True)
    node = models.CharField(max_length=300, blank=True)
    trace_ids = models.JSONField(default=list, blank=True)
    sample_rate = models.FloatField(default=1.0)

    # The judges: names ("rule.span_error", "rubric.12", "llm.trace"…), resolved from the defaults at creation.
    judges = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=300, blank=True)
    rubric_ids = models.JSONField(default=all_rubrics, blank=True, help_text='"all" (every enabled rubric) or a list of ids')
    budget_tokens = models.BigIntegerField(null=True, blank=True)
    budget_cost = models.FloatField(null=True, blank=True)
    # Execution knobs: "concurrency" (overrides CLEAR_JUDGE_CONCURRENCY); test hooks "trace_delay_seconds",
    # "fake_tokens_per_trace", "fake_cost_per_trace" (simulate slow or paid judging without a model).
    config = models.JSONField(default=dict, blank=True)
    # Per (node, kind, tool) duration and token medians/MADs over the run's spans, for the outlier rules.
    node_stats = models.JSONField(default=dict, blank=True)

    total_count = models.PositiveIntegerField(default=0)
    done_count = models.PositiveIntegerField(default=0)
    skipped_count = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    error_count = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True, help_text="the first errors: [{trace_id, judge, error}]")
    dropped_evidence = models.PositiveIntegerField(default=0)
    failure_message = models.TextField(blank=True)
    # Insights (diagnosis/insights/): "" (not requested) → queued → running → done / failed. The build claims the
    # run with a conditional update on this field, so a redelivered task does nothing.
    insights_status = models.CharField(max_length=10, blank=True, default="")
    insights_started_at = models.DateTimeField(null=True, blank=True)
    insights_finished_at = models.DateTimeField(null=True, blank=True)
    insights_error = models.TextField(blank=True)
    insights_summary = models.JSONField(default=dict, blank=True, help_text="judged traces (per release), statements, "
                                        "insights new/matched/reopened, embedding and naming counts")

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "continuous_key"], condition=Q(continuous=True), name="diagnosis_run_one_continuous"
            ),
            models.CheckConstraint(condition=Q(sample_rate__gt=0) & Q(sample_rate__lte=1), name="diagnosis_run_sample"),
        ]
        indexes = [models.Index(fields=["project", "-created_at"], name="diagnosis_run_project_created")]

    def __str__(self) -> str:
        return self.name or str(self.id)

    @property
    def is_finished(self) -> bool:
        return self.status not in self.ACTIVE

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def is_full(self) -> bool:
        """Judged every trace of a whole release (or of everything): no filter but the release, no sampling, not
        stopped early, neither continuous nor a gate's. Such runs give insights their headline figures first
        (diagnosis/insights/headline.py)."""
        return self.status == self.Status.SUCCEEDED and self._scope_kind() == "full"

    @classmethod
    def writes_insights_q(cls) -> Q:
        """writes_insights as a filter: a continuous run, or one that is neither a gate's, sampled nor filtered."""
        unfiltered = Q(since__isnull=True, until__isnull=True, tags=[], outcome="", node="", trace_ids=[])
        return Q(continuous=True) | (~Q(purpose=cls.Purpose.GATE) & Q(sample_rate__gte=1) & unfiltered)

    @property
    def writes_insights(self) -> bool:
        """Whether building this run's insights may create, merge or change the project's insights and tickets: not
        for a CI gate's, a sampled or a filtered run (a release alone is no filter), whose clusters are kept on the
        run (diagnosis/insights/detached.py), whatever the state it ended in. writes_insights_q is the same rule as a
        filter."""
        return self._scope_kind() not in ("CI gate", "sampled", "filtered")

    def _scope_kind(self) -> str:
        if self.continuous:
            return "continuous"
        if self.purpose == self.Purpose.GATE:
            return "CI gate"
        if self.sample_rate < 1:
            return "sampled"
        if self.since or self.until or self.tags or self.outcome or self.node or self.trace_ids:
            return "filtered"
        if self.is_finished and self.status != self.Status.SUCCEEDED:
            return "stopped early"
        return "full"

    @property
    def scope_label(self) -> str:
        """What the run covered, for "figures from run X (release v2, full)"."""
        return f"{f'release {self.release}' if self.release else 'all releases'}, {self._scope_kind()}"


class RunTrace(models.Model):
    """One trace of a run: its place in the fan-out (at most CLEAR_JUDGE_CONCURRENCY queued or running at once)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        SKIPPED = "skipped", "Skipped"  # the run was cancelled or ran out of budget first

    IN_FLIGHT = (Status.QUEUED, Status.RUNNING)
    OPEN = (Status.PENDING, Status.QUEUED, Status.RUNNING)

    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="items")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "trace"], name="run_trace_unique")]
        indexes = [models.Index(fields=["run", "status"], name="run_trace_status")]


class Rubric(models.Model):
    """A project's own check. Deterministic kinds run as code; `llm` rubrics go to the LLM trace judge."""

    class Kind(models.TextChoices):
        REGEX = "regex", "Regular expression"
        JSONPATH = "jsonpath", "JSONPath assertion"
        TOOL_ORDER = "tool_order", "Tool X is called (before tool Y)"
        TOOL_NEVER = "tool_never", "Tool X is never called"
        COVERAGE = "coverage", "Values from some spans appear in another span's output"
        LLM = "llm", "Natural-language criterion (LLM trace judge)"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rubrics")
    node = models.CharField(max_length=300, blank=True, help_text="limit the rubric to this node's spans")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    config = models.JSONField(default=dict)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="rubric_unique_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def judge_name(self) -> str:
        return f"rubric.{self.pk}"


class Feedback(models.Model):
    """One judge's verdict on one trace (target_span_id null) or one span, within a run."""

    class Status(models.TextChoices):
        OK = "ok", "OK"
        ERROR = "error", "Error"
        SKIPPED = "skipped", "Skipped"
        TRUNCATED = "truncated", "Truncated"

    class Verdict(models.TextChoices):
        PASS = "pass", "Pass"
        FAIL = "fail", "Fail"
        UNCERTAIN = "uncertain", "Uncertain"

    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="feedback")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="feedback")
    target_span_id = models.CharField(max_length=16, null=True, blank=True)
    judge = models.CharField(max_length=200)
    judge_kind = models.CharField(max_length=20, help_text="rule, rubric or llm")
    rubric = models.ForeignKey(Rubric, null=True, blank=True, on_delete=models.SET_NULL, related_name="feedback")
    model = models.CharField(max_length=300, blank=True)
    prompt_version = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OK)
    score = models.FloatField(null=True, blank=True)
    verdict = models.CharField(max_length=10, choices=Verdict.choices, null=True, blank=True)
    critique = models.TextField(blank=True)
    issues = models.JSONField(default=list, blank=True)
    details = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    latency_ms = models.FloatField(default=0.0)
    cache_key = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # A redelivered task writes the same keys again and gets the existing rows: never a duplicate.
            # Two partial constraints because NULLs never collide in a plain unique index (whole-trace feedback).
            models.UniqueConstraint(
                fields=["run", "trace", "judge", "target_span_id"], condition=Q(target_span_id__isnull=False),
                name="feedback_unique_span_target",
            ),
            models.UniqueConstraint(
                fields=["run", "trace", "judge"], condition=Q(target_span_id__isnull=True),
                name="feedback_unique_trace_target",
            ),
        ]
        indexes = [
            models.Index(fields=["project", "judge"], name="feedback_project_judge"),
            models.Index(fields=["run", "verdict"], name="feedback_run_verdict"),
        ]


class JudgeCacheEntry(models.Model):
    """A judge's result for content it has seen before: the key hashes judge, prompt version, model and content."""

    key = models.CharField(max_length=64, primary_key=True)
    result = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    hits = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)


class ContinuousMark(models.Model):
    """A trace taken by continuous mode: the row's existence is the claim, so each trace is judged once."""

    trace = models.OneToOneField(Trace, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="+")
    claim = models.UUIDField(db_index=True)
    claimed_at = models.DateTimeField(auto_now_add=True)


class FeedbackCorrection(models.Model):
    """A person's verdict that a judge's feedback is wrong. Its statements (and those of the same judge on the same
    trace and target in later runs) are left out of insight clustering."""

    feedback = models.OneToOneField(Feedback, on_delete=models.CASCADE, related_name="correction")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)


class EmbeddingCache(models.Model):
    """A statement embedding by text hash (sha256 of model identity and text): float32 bytes, L2-normalised."""

    text_hash = models.CharField(max_length=64, primary_key=True)
    model = models.CharField(max_length=300)
    vector = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)
