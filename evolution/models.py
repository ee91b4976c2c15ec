"""Evolution: targets (agent repositories), jobs as an explicit state machine, and everything a job records.

The state machine's rules live in evolution/services/jobs.py (one transition helper); these are the rows.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from clear.projects.models import Project


class EvolutionTarget(models.Model):
    """An agent repository Clear may try to fix: a local path or git URL plus its validated evolution config.

    Registered through the API or the web UI, it is `cloning` until a worker has read the repository
    (services/target_cloning.py), then `ready` or `failed`; jobs start on a ready target only."""

    class State(models.TextChoices):
        CLONING = "cloning"
        READY = "ready"
        FAILED = "failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="evolution_targets")
    name = models.CharField(max_length=200)
    source = models.CharField(max_length=1000, help_text="local path or git URL the mirror is cloned from")
    default_branch = models.CharField(max_length=200, blank=True, help_text="blank: the source's HEAD")
    push_url = models.CharField(max_length=1000, blank=True, help_text="where PR branches go; blank: the source")
    config = models.JSONField(default=dict, help_text="validated by evolution.config.target_config_validate; empty "
                                                      "until the repository's evolution.json of a new target is read")
    config_requested = models.JSONField(null=True, blank=True,
                                        help_text="a new target's config as given (null: its evolution.json alone), "
                                                  "checked against the repository by the clone")
    state = models.CharField(max_length=10, choices=State.choices, default=State.READY)
    state_reason = models.TextField(blank=True, help_text="failed: why, in Clear's words (never git's output)")
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_version = models.PositiveIntegerField(default=0, help_text="one more per clone asked for; a clone's "
                                                                     "outcome is kept only if none was asked since")
    clone_started_at = models.DateTimeField(null=True, blank=True, help_text="the worker's claim of the clone")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="evolution_target_name_unique")]

    def __str__(self) -> str:
        return self.name


class JobState(models.TextChoices):
    QUEUED = "QUEUED"
    PREPARING = "PREPARING"
    BASELINE = "BASELINE"
    LOCATING = "LOCATING"
    PLANNING = "PLANNING"
    PLAN_REVIEW = "PLAN_REVIEW"
    IMPLEMENTING = "IMPLEMENTING"
    CODE_REVIEW = "CODE_REVIEW"
    CHECKING = "CHECKING"
    TRIALS = "TRIALS"
    VERDICT = "VERDICT"
    AWAITING_CONSENT = "AWAITING_CONSENT"
    PROMOTING = "PROMOTING"
    HEALTH_CHECK = "HEALTH_CHECK"
    ROLLING_BACK = "ROLLING_BACK"
    PROMOTED = "PROMOTED"
    PR_OPENED = "PR_OPENED"
    REJECTED = "REJECTED"
    NO_IMPROVEMENT = "NO_IMPROVEMENT"
    ROLLED_BACK = "ROLLED_BACK"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"


TERMINAL_STATES = (
    JobState.PROMOTED, JobState.PR_OPENED, JobState.REJECTED, JobState.NO_IMPROVEMENT, JobState.ROLLED_BACK,
    JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED,
)


class EvolutionJob(models.Model):
    class Depth(models.TextChoices):
        SHALLOW = "shallow"
        STANDARD = "standard"
        DEEP = "deep"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="evolution_jobs")
    target = models.ForeignKey(EvolutionTarget, on_delete=models.PROTECT, related_name="jobs")
    insight = models.ForeignKey("diagnosis.Insight", on_delete=models.PROTECT, related_name="evolution_jobs")
    ticket = models.ForeignKey("tickets.Ticket", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="evolution_jobs")
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.QUEUED)
    state_version = models.PositiveIntegerField(default=0)
    depth = models.CharField(max_length=10, choices=Depth.choices, default=Depth.STANDARD)
    backend_name = models.CharField(max_length=100)
    backend_config = models.JSONField(default=dict, blank=True)
    sandbox_level = models.CharField(max_length=20, blank=True, help_text="chosen at PREPARING")
    base_commit = models.CharField(max_length=40, blank=True)
    base_release = models.ForeignKey("Release", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="based_jobs",
                                     help_text="hot swap: the live release the job started from (its base_commit)")
    current_iteration = models.PositiveIntegerField(default=0)
    best_iteration = models.ForeignKey("Iteration", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+")
    stop_requested = models.BooleanField(default=False)
    consent_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    consent_at = models.DateTimeField(null=True, blank=True)
    consent_patch_sha256 = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    config_snapshot = models.JSONField(default=dict, blank=True, help_text="{target: config, policy: ...} at start")
    terminal_reason = models.CharField(max_length=60, blank=True)
    error = models.TextField(blank=True)
    pr_branch = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # At most one job works on a repository at a time (MOSS's busy flag, enforced by the database).
            models.UniqueConstraint(fields=["target"], condition=~Q(state__in=[s.value for s in TERMINAL_STATES]),
                                    name="evolution_one_active_job_per_target"),
        ]
        indexes = [models.Index(fields=["state", "heartbeat_at"], name="evolution_job_state_heartbeat")]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def policy(self) -> dict:
        return self.config_snapshot.get("policy", {})

    @property
    def target_config(self) -> dict:
        return self.config_snapshot.get("target", {})


class Iteration(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        FAILED = "failed"  # plan/code rejected, gates failed, malformed output: no trials
        EVALUATED = "evaluated"  # trials ran and a verdict was given

    job = models.ForeignKey(EvolutionJob, on_delete=models.CASCADE, related_name="iterations")
    n = models.PositiveIntegerField()
    base_commit = models.CharField(max_length=40)
    candidate_commit = models.CharField(max_length=40, blank=True)
    patch_sha256 = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    failure_reason = models.CharField(max_length=60, blank=True)
    verdict = models.CharField(max_length=20, blank=True)
    score = models.FloatField(null=True, blank=True, help_text="candidate mean target score, when gate-satisfying")
    metrics = models.JSONField(default=dict, blank=True)
    feedback = models.JSONField(default=list, blank=True, help_text="reviewer/gate feedback for the next round")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "n"], name="evolution_iteration_unique")]
        ordering = ["job", "n"]


class StageRun(models.Model):
    """One execution of a stage; (job, iteration_n, stage, round) is the idempotency key of its Celery task."""

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    job = models.ForeignKey(EvolutionJob, on_delete=models.CASCADE, related_name="stage_runs")
    iteration = models.ForeignKey(Iteration, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="stage_runs")
    iteration_n = models.PositiveIntegerField(default=0)
    stage = models.CharField(max_length=20)
    round = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    claim = models.CharField(max_length=32)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    backend = models.CharField(max_length=100, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    timed_out = models.BooleanField(default=False)
    isolation_level = models.CharField(max_length=20, blank=True)
    tree_hash_before = models.CharField(max_length=40, blank=True)
    tree_hash_after = models.CharField(max_length=40, blank=True)
    output = models.JSONField(null=True, blank=True)
    outcome = models.CharField(max_length=40, blank=True, help_text="e.g. APPROVE, REJECT, OUTPUT_MALFORMED")
    error = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "iteration_n", "stage", "round"],
                                               name="evolution_stage_run_key")]
        ordering = ["started_at", "pk"]


class Artifact(models.Model):
    """A file a stage produced, stored once by content (CLEAR_EVOLUTION_DIR/artifacts/<sha[:2]>/<sha>)."""

    job = models.ForeignKey(EvolutionJob, on_delete=models.CASCADE, related_name="artifacts")
    iteration = models.ForeignKey(Iteration, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="artifacts")
    stage_run = models.ForeignKey(StageRun, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="artifacts")
    kind = models.CharField(max_length=30)
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    mime = models.CharField(max_length=100, default="application/json")
    path = models.CharField(max_length=500, help_text="relative to CLEAR_EVOLUTION_DIR")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["job", "kind"], name="evolution_artifact_kind")]
        ordering = ["created_at", "pk"]


class TaskSpec(models.Model):
    """A task the job's trials run, snapshotted at PREPARING so later changes to traces or the suite don't move it."""

    class Kind(models.TextChoices):
        TARGET = "target"
        REGRESSION = "regression"

    job = models.ForeignKey(EvolutionJob, on_delete=models.CASCADE, related_name="tasks")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    source = models.CharField(max_length=20, help_text="insight_trace, suite or promoted")
    task_id = models.CharField(max_length=200)
    seed = models.BigIntegerField(default=0)
    trace_id = models.CharField(max_length=32, blank=True)
    trials = models.PositiveIntegerField()
    timeout_s = models.FloatField()
    reproduces = models.BooleanField(null=True, blank=True, help_text="targets: failed at baseline")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "task_id", "seed"], name="evolution_task_unique")]
        ordering = ["kind", "task_id", "seed"]


class TrialRun(models.Model):
    class Arm(models.TextChoices):
        BASELINE = "baseline"
        CANDIDATE = "candidate"

    job = models.ForeignKey(EvolutionJob, on_delete=models.CASCADE, related_name="trial_runs")
    iteration = models.ForeignKey(Iteration, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="trial_runs")
    iteration_n = models.PositiveIntegerField(default=0, help_text="0: the baseline arm")
    task = models.ForeignKey(TaskSpec, on_delete=models.CASCADE, related_name="trial_runs")
    arm = models.CharField(max_length=10, choices=Arm.choices)
    trial_n = models.PositiveIntegerField()
    seed = models.BigIntegerField()
    score = models.FloatField(default=0.0)
    passed = models.BooleanField(default=False)
    duration_s = models.FloatField(default=0.0)
    exit_code = models.IntegerField(null=True, blank=True)
    timed_out = models.BooleanField(default=False)
    isolation_level = models.CharField(max_length=20)
    grade = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    artifact = models.ForeignKey(Artifact, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "iteration_n", "task", "arm", "trial_n"],
                                               name="evolution_trial_unique")]


class Verdict(models.Model):
    iteration = models.OneToOneField(Iteration, on_delete=models.CASCADE, related_name="verdict_record")
    decision = models.CharField(max_length=20)
    rules = models.JSONField(default=list, help_text="[{name, value, threshold, passed, detail}]")
    policy = models.JSONField(default=dict)
    summary = models.TextField(blank=True)
    grader_commit = models.CharField(max_length=40, blank=True, help_text="the base commit graders ran from")
    created_at = models.DateTimeField(auto_now_add=True)


class AuditEvent(models.Model):
    """Append-only record of what happened to a job (written in the same transaction as the change)."""

    job = models.ForeignKey(EvolutionJob, on_delete=models.CASCADE, related_name="events")
    ts = models.DateTimeField(auto_now_add=True)
    actor = models.CharField(max_length=200)
    event = models.CharField(max_length=60)
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["ts", "pk"]


class Release(models.Model):
    """A hot-swap release of a target (evolution.md §7.2), kept in step with evolution/deploy's state.json, which
    stays the authority on disk (`current`, last-good); these rows are the history the pages and the loop read."""

    class Status(models.TextChoices):
        STAGED = "staged"  # staged, being health-checked (or its promoter died)
        ACTIVE = "active"  # `current` points at it and it passed its health window
        SUPERSEDED = "superseded"  # an active release a later one replaced
        ROLLED_BACK = "rolled_back"  # failed its window; `current` went back to the previous release
        FAILED = "failed"  # preflight failed, or it stayed current unhealthy (nothing to roll back to)

    target = models.ForeignKey(EvolutionTarget, on_delete=models.CASCADE, related_name="releases")
    job = models.ForeignKey(EvolutionJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="releases")
    release_id = models.CharField(max_length=200, help_text="the directory under <releases root>/releases/")
    commit = models.CharField(max_length=40, blank=True)
    path = models.CharField(max_length=1000)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.STAGED)
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                 help_text="the release `current` pointed at before this one was swapped in")
    health_report = models.JSONField(default=dict, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["target", "release_id"], name="evolution_release_unique")]
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.release_id


class InsightFix(models.Model):
    """The release that carries a promoted fix for an insight, watched by later diagnosis runs (closing the loop):
    the insight is marked fixed when its frequency among traces of that release (or later ones) falls under
    CLEAR_INSIGHT_FIXED_BELOW, and this row notes a reopening when the pattern comes back."""

    class Status(models.TextChoices):
        WATCHING = "watching"  # promoted, no qualifying run yet
        FIXED = "fixed"
        REOPENED = "reopened"
        ROLLED_BACK = "rolled_back"  # its release was rolled back: the fix is no longer live

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    insight = models.ForeignKey("diagnosis.Insight", on_delete=models.CASCADE, related_name="evolution_fixes")
    job = models.OneToOneField(EvolutionJob, on_delete=models.CASCADE, related_name="fix")
    release = models.CharField(max_length=200, help_text="the trace release (service.version) carrying the fix")
    commit = models.CharField(max_length=40, blank=True)
    promoted_at = models.DateTimeField(help_text="traces of releases first seen after this count as later ones")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.WATCHING)
    fixed_run = models.ForeignKey("diagnosis.DiagnosisRun", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    reopened_run = models.ForeignKey("diagnosis.DiagnosisRun", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    evidence = models.JSONField(default=dict, blank=True, help_text="the last check: judged, affected, frequency")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["project", "status"], name="evolution_fix_project_status")]


class ReleaseRollback(models.Model):
    """A person's rollback of a hot-swap target (the release history's button, the API), run by the Celery task
    `evolution.release_rollback`: queued by the request, claimed by the task with a conditional update, then the
    swap, reload and health re-probe; the releases page polls its status."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"  # `current` is the release asked for and passed its health probes
        FAILED = "failed"  # refused, or the release went back but failed its re-probe (needs a person)

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    target = models.ForeignKey(EvolutionTarget, on_delete=models.CASCADE, related_name="rollbacks")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    actor = models.CharField(max_length=200)
    from_release = models.CharField(max_length=200, blank=True, help_text="what `current` pointed at when asked")
    to_release = models.CharField(max_length=200, blank=True, help_text="blank: the latest healthy earlier one")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    outcome = models.CharField(max_length=20, blank=True, help_text="deploy's outcome: rolled_back or failed")
    active_release = models.CharField(max_length=200, blank=True, help_text="what `current` points at after it")
    detail = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True, help_text="deploy's PromotionResult.to_dict()")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["target"], condition=Q(status__in=["queued", "running"]),
                                    name="evolution_one_active_rollback_per_target"),
        ]
        ordering = ["-created_at", "-pk"]

    @property
    def is_done(self) -> bool:
        return self.status not in self.ACTIVE
