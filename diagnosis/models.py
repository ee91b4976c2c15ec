"""Diagnosis data: runs over a set of traces, the feedback judges leave on traces and spans, rubrics, the judge cache."""

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
        above 1); "not_associated": the interval includes 1 or lies below it, so it shows in successes alike;
        "unknown": no judged trace had a recorded outcome, so there is no lift."""
        if self.lift is None or self.lift_low is None:
            return "unknown"
        return "associated" if self.lift_low > 1 else "not_associated"

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
