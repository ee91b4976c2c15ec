"""Output shapes of the evolution REST API (/api/v1/evolution/), shared by the list, detail and action endpoints."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from evolution.models import Artifact, AuditEvent, EvolutionJob, EvolutionTarget, Release, StageRun
from evolution.selectors import IterationReview
from evolution.services.api_actions import MODES, job_mode


class TargetOutputSerializer(serializers.ModelSerializer):
    config = serializers.JSONField(help_text="the validated evolution config (see evolution/config.py); {} until a "
                                             "worker has read a new target's evolution.json")
    state = serializers.ChoiceField(choices=EvolutionTarget.State.choices,
                                    help_text="cloning: a worker is reading the repository (jobs wait for ready); "
                                              "ready: jobs may start; failed: see state_reason, then correct the "
                                              "target and save it to read the repository again")
    state_reason = serializers.CharField(help_text="failed: why, in a few fixed words (never git's own output)")

    class Meta:
        model = EvolutionTarget
        fields = ["id", "name", "source", "default_branch", "push_url", "config", "state", "state_reason",
                  "state_changed_at", "created_at", "updated_at"]


class CandidateSerializer(serializers.Serializer):
    iteration = serializers.IntegerField(source="n")
    base_commit = serializers.CharField()
    commit = serializers.CharField(source="candidate_commit")
    patch_sha256 = serializers.CharField(help_text="send this to approve/: the hash of the diff you reviewed")
    verdict = serializers.CharField()
    score = serializers.FloatField(allow_null=True)


class JobOutputSerializer(serializers.ModelSerializer):
    target = serializers.SerializerMethodField()
    insight_id = serializers.IntegerField()
    ticket_id = serializers.IntegerField(allow_null=True)
    mode = serializers.SerializerMethodField()
    terminal = serializers.BooleanField(source="is_terminal")
    candidate = serializers.SerializerMethodField(help_text="the best candidate so far (what approve/ promotes)")
    base_release = serializers.SerializerMethodField(
        help_text="hot swap: the release the job started from (the live one then); null in PR mode")
    release_rolled_back = serializers.SerializerMethodField(
        help_text="the release this job promoted was rolled back since: its fix is no longer live")

    class Meta:
        model = EvolutionJob
        fields = [
            "id", "state", "terminal", "target", "insight_id", "ticket_id", "depth", "backend_name", "mode",
            "sandbox_level", "base_commit", "base_release", "release_rolled_back", "current_iteration", "candidate", "stop_requested", "terminal_reason",
            "error", "pr_branch", "created_at", "updated_at", "finished_at", "heartbeat_at",
        ]

    @extend_schema_field(serializers.DictField(help_text="{id, name}"))
    def get_target(self, job: EvolutionJob) -> dict:
        return {"id": job.target_id, "name": job.target.name}

    @extend_schema_field(serializers.ChoiceField(choices=MODES))
    def get_mode(self, job: EvolutionJob) -> str:
        return job_mode(job)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_base_release(self, job: EvolutionJob) -> str | None:
        return job.base_release.release_id if job.base_release_id and job.base_release else None

    @extend_schema_field(serializers.BooleanField())
    def get_release_rolled_back(self, job: EvolutionJob) -> bool:
        flag = getattr(job, "release_rolled_back", None)
        if flag is None:
            flag = job.releases.filter(status=Release.Status.ROLLED_BACK).exists()
        return bool(flag)

    @extend_schema_field(CandidateSerializer(allow_null=True))
    def get_candidate(self, job: EvolutionJob) -> dict | None:
        best = job.best_iteration
        return CandidateSerializer(best).data if best is not None and best.candidate_commit else None


class StageRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = StageRun
        fields = ["id", "iteration_n", "stage", "round", "status", "outcome", "started_at", "finished_at", "backend",
                  "exit_code", "timed_out", "tokens_in", "tokens_out", "cost_usd", "isolation_level", "error"]


class ArtifactSerializer(serializers.ModelSerializer):
    iteration = serializers.IntegerField(source="iteration.n", allow_null=True, default=None)
    download = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = ["id", "iteration", "kind", "name", "sha256", "size", "mime", "created_at", "download"]

    def get_download(self, artifact: Artifact) -> str:
        return reverse("evolution:job-artifact", kwargs={"job_id": artifact.job_id, "artifact_id": artifact.pk})


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["id", "ts", "actor", "event", "from_state", "to_state", "data"]


class TrialSerializer(serializers.Serializer):
    trial = serializers.IntegerField()
    seed = serializers.IntegerField()
    score = serializers.FloatField()
    passed = serializers.BooleanField()
    timed_out = serializers.BooleanField()
    error = serializers.CharField()


class TaskScoresSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    seed = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["target", "regression"])
    trace_id = serializers.CharField(help_text="targets: the failing trace the task came from")
    reproduces = serializers.BooleanField(allow_null=True, help_text="targets: failed at baseline")
    baseline = TrialSerializer(many=True)
    candidate = TrialSerializer(many=True, help_text="empty when not run (the cascade stopped)")
    baseline_mean = serializers.FloatField(allow_null=True)
    candidate_mean = serializers.FloatField(allow_null=True)
    baseline_passes = serializers.IntegerField()
    candidate_passes = serializers.IntegerField()
    delta = serializers.FloatField(allow_null=True)


class RuleSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.JSONField()
    threshold = serializers.JSONField()
    passed = serializers.BooleanField(allow_null=True, help_text="null: not run (an earlier gate failed)")
    detail = serializers.CharField(allow_blank=True)


class VerdictSerializer(serializers.Serializer):
    decision = serializers.CharField(help_text="PROMOTE_ELIGIBLE, NEED_MORE_WORK, REJECT_REGRESSION, NO_IMPROVEMENT")
    summary = serializers.CharField()
    rules = RuleSerializer(many=True, help_text="the verdict's gates G0..G2 with value, threshold, pass")
    created_at = serializers.DateTimeField()


class IterationSerializer(serializers.Serializer):
    n = serializers.IntegerField(source="iteration.n")
    status = serializers.CharField(source="iteration.status")
    base_commit = serializers.CharField(source="iteration.base_commit")
    candidate_commit = serializers.CharField(source="iteration.candidate_commit")
    patch_sha256 = serializers.CharField(source="iteration.patch_sha256")
    failure_reason = serializers.CharField(source="iteration.failure_reason")
    score = serializers.FloatField(source="iteration.score", allow_null=True)
    gates = RuleSerializer(many=True, help_text="the hard gates of CHECKING (path policy, diff budget, tests...)")
    verdict = VerdictSerializer(allow_null=True)
    tasks = TaskScoresSerializer(many=True, help_text="per task: baseline vs candidate trial scores")


def iterations_data(reviews: list[IterationReview]) -> list[dict]:
    rows = []
    for review in reviews:
        gates = [{"name": g.get("name", ""), "value": g.get("value"), "threshold": g.get("threshold"),
                  "passed": g.get("passed"), "detail": str(g.get("detail", ""))} for g in review.gates]
        rows.append(IterationSerializer({"iteration": review.iteration, "gates": gates, "verdict": review.verdict,
                                         "tasks": review.tasks}).data)
    return rows
