"""/api/v1/evolution/jobs/: start, list and follow jobs, cancel, mark the PR merged, download an artifact. Approve and
discard answer every key 403: a person decides, in the web UI."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.fields import json_storable
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from clear.errors import ClearError, NotFoundError
from diagnosis.selectors import insight_get
from diagnosis.tickets.selectors import ticket_get
from evolution.apis.common import (
    CONFLICT, ID, PERSON_REQUIRED, body_valid, person_required, request_actor, request_actor_name,
)
from evolution.models import EvolutionJob, JobState
from evolution.selectors import (
    evolution_artifact_get,
    evolution_job_artifacts,
    evolution_job_events,
    evolution_job_get,
    evolution_job_list,
    evolution_job_review,
    evolution_job_stage_runs,
    evolution_target_by_id,
)
from evolution.serializers import (
    ArtifactSerializer,
    EventSerializer,
    IterationSerializer,
    JobOutputSerializer,
    StageRunSerializer,
    iterations_data,
)
from evolution.services import evolution_job_cancel
from evolution.services.api_actions import MODES, evolution_job_create
from evolution.services.watch import evolution_job_mark_merged
from evolution.services.workspace import artifact_read


class JobListApi(ProjectApi):
    """The project's evolution jobs, newest first."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        state = serializers.ChoiceField(choices=JobState.values, required=False)
        active = serializers.BooleanField(required=False, allow_null=True, default=None,
                                          help_text="true: running or waiting; false: ended")
        target = serializers.IntegerField(required=False, **ID, help_text="a target id")
        insight = serializers.IntegerField(required=False, **ID, help_text="an insight id")

    @extend_schema(operation_id="evolution_jobs_list", parameters=[FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(JobOutputSerializer, "PaginatedEvolutionJobList"))
    def get(self, request: Request) -> Response:
        project = self.project(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        jobs = evolution_job_list(project=project, active=params.get("active"))
        # A target or insight of another project matches nothing, like any other filter value.
        if "state" in params:
            jobs = jobs.filter(state=params["state"])
        if "target" in params:
            jobs = jobs.filter(target_id=params["target"])
        if "insight" in params:
            jobs = jobs.filter(insight_id=params["insight"])
        page = paginate(queryset=jobs, request=request, ordering=("-created_at", "-pk"))
        return Response(page_body(page=page, results=JobOutputSerializer(page.rows, many=True).data))


class JobCreateApi(ProjectApi):
    """Start a job: the coding backend works on the target to fix the insight (given directly or through its
    ticket). It runs in the background; follow it on GET /api/v1/evolution/jobs/{job_id}/. 409 target_busy when
    the target already has an active job, 409 target_not_ready while it is cloning or after it failed (`extra`
    names its state and reason); 400 for a bad backend config or a backend that is not usable here."""

    class InputSerializer(serializers.Serializer):
        target = serializers.IntegerField(**ID, help_text="a target id")
        insight = serializers.IntegerField(required=False, allow_null=True, default=None, **ID,
                                           help_text="the insight to fix (or give `ticket`)")
        ticket = serializers.IntegerField(required=False, allow_null=True, default=None, **ID,
                                          help_text="a ticket: its insight is the one to fix")
        backend = serializers.CharField(max_length=100, help_text="scripted, litellm or external")
        backend_config = serializers.JSONField(required=False, default=dict, validators=[json_storable],
                                               help_text='e.g. {"script_path": "..."} for scripted (one of the '
                                                         "target's scripted_fixtures, or an inline `script`); an "
                                                         "`api_key_env` must be one of the setting "
                                                         "CLEAR_EVOLUTION_BACKEND_ENV_ALLOW; see "
                                                         'evolution/backends/BACKENDS.md')
        depth = serializers.ChoiceField(choices=EvolutionJob.Depth.choices, required=False, default="standard")
        mode = serializers.ChoiceField(choices=MODES, required=False, default="pr",
                                       help_text="pr: push a branch; hot_swap: swap a release in with a health "
                                                 "check (the target needs a hot_swap config)")
        confirm = serializers.BooleanField(required=False, default=False,
                                           help_text="true: start even though the insight already has a live or "
                                                     "pending fix (409 insight_fix_exists otherwise)")

        def validate(self, data):
            if not data.get("insight") and not data.get("ticket"):
                raise serializers.ValidationError({"insight": "give an insight id or a ticket id"})
            if not isinstance(data.get("backend_config"), dict):
                raise serializers.ValidationError({"backend_config": "must be a JSON object"})
            return data

    @extend_schema(operation_id="evolution_jobs_create", request=InputSerializer,
                   responses={201: JobOutputSerializer,
                              404: OpenApiResponse(description="the target, insight or ticket is not in this project"),
                              409: OpenApiResponse(description="target_busy: the target has an active job; "
                                                               "target_not_ready: it is cloning or failed; "
                                                               "insight_fix_exists: the insight has a live or "
                                                               "pending fix and `confirm` is not true")})
    def post(self, request: Request) -> Response:
        project = self.project(request)
        values = body_valid(self.InputSerializer, request)
        target = evolution_target_by_id(project=project, target_id=values["target"])
        ticket = ticket_get(project=project, ticket_id=values["ticket"]) if values["ticket"] else None
        if values["insight"]:
            insight = insight_get(project=project, insight_id=values["insight"])
            if ticket is not None and ticket.insight_id != insight.pk:
                raise ClearError(f"Ticket {ticket.pk} is not the ticket of insight {insight.pk}; give one of them",
                                 extra={"fields": {"ticket": "not this insight's ticket"}})
        else:
            if ticket.insight_id is None:
                raise ClearError(f"Ticket {ticket.pk} has no insight to fix",
                                 extra={"fields": {"ticket": "no insight"}})
            insight = insight_get(project=project, insight_id=ticket.insight_id)
        job = evolution_job_create(project=project, target=target, insight=insight, ticket=ticket,
                                   backend_name=values["backend"], backend_config=values["backend_config"],
                                   depth=values["depth"], mode=values["mode"], confirm=values["confirm"],
                                   created_by=request_actor(request).get("user"))
        job = evolution_job_get(project=project, job_id=job.pk)
        return Response(JobOutputSerializer(job).data, status=status.HTTP_201_CREATED)


def job_detail_body(*, project, job: EvolutionJob) -> dict:
    reviews = evolution_job_review(project=project, job=job)
    iterations = iterations_data(reviews)
    # The verdict shown first: the best candidate's, else the latest iteration that got one.
    best_n = job.best_iteration.n if job.best_iteration else None
    judged = [row for row in iterations if row["verdict"] is not None]
    verdict = next((row for row in judged if row["n"] == best_n), judged[-1] if judged else None)
    return {
        **JobOutputSerializer(job).data,
        "consent": {"by": job.consent_by.email if job.consent_by else None, "at": job.consent_at,
                    "patch_sha256": job.consent_patch_sha256} if job.consent_at else None,
        "stages": StageRunSerializer(evolution_job_stage_runs(project=project, job=job), many=True).data,
        "iterations": iterations,
        "verdict": verdict,
        "artifacts": ArtifactSerializer(evolution_job_artifacts(project=project, job=job), many=True).data,
        "events": EventSerializer(evolution_job_events(project=project, job=job), many=True).data,
    }


class JobDetailApi(ProjectApi):
    """One job: its state, the stage timeline, each iteration's gates, verdict and per-task baseline vs candidate
    scores, the artifacts and the audit events."""

    class OutputSerializer(JobOutputSerializer):
        consent = inline_serializer(name="EvolutionJobConsent", allow_null=True, fields={
            "by": serializers.CharField(allow_null=True), "at": serializers.DateTimeField(),
            "patch_sha256": serializers.CharField()})
        stages = StageRunSerializer(many=True)
        iterations = IterationSerializer(many=True)
        verdict = IterationSerializer(allow_null=True, help_text="the best candidate's iteration, else the latest "
                                                                 "one with a verdict")
        artifacts = ArtifactSerializer(many=True)
        events = EventSerializer(many=True)

        class Meta(JobOutputSerializer.Meta):
            fields = [*JobOutputSerializer.Meta.fields, "consent", "stages", "iterations", "verdict", "artifacts",
                      "events"]

    @extend_schema(operation_id="evolution_jobs_retrieve", responses=OutputSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        project = self.project(request)
        job = evolution_job_get(project=project, job_id=job_id)
        return Response(job_detail_body(project=project, job=job))


class JobCancelApi(ProjectApi):
    """Stop a job: a queued job or one awaiting consent ends CANCELLED at once, a running one at its next stage
    boundary (a running sandbox process is killed). 409 when it has ended already."""

    @extend_schema(operation_id="evolution_jobs_cancel", request=None,
                   responses={200: JobOutputSerializer, 409: CONFLICT})
    def post(self, request: Request, job_id: int) -> Response:
        project = self.project(request)
        job = evolution_job_get(project=project, job_id=job_id)
        evolution_job_cancel(job=job, actor=request_actor_name(request))
        return Response(JobOutputSerializer(evolution_job_get(project=project, job_id=job.pk)).data)


class JobApproveApi(ProjectApi):
    """Approving a candidate promotes it (a hot-swap job makes it the live release): a person does it, logged in as
    an owner of the project, on the job's page in the web UI. Every project key gets 403 person_required, before the
    job is looked up."""

    @extend_schema(operation_id="evolution_jobs_approve", request=None, responses={403: PERSON_REQUIRED})
    def post(self, request: Request, job_id: int) -> Response:
        raise person_required(action="approve a job's candidate", page="the job's page (Evolution → Jobs)")


class JobDiscardApi(ProjectApi):
    """Discarding a candidate is a person's decision too: an owner of the project does it on the job's page in the
    web UI. Every project key gets 403 person_required, before the job is looked up."""

    @extend_schema(operation_id="evolution_jobs_discard", request=None, responses={403: PERSON_REQUIRED})
    def post(self, request: Request, job_id: int) -> Response:
        raise person_required(action="discard a job's candidate", page="the job's page (Evolution → Jobs)")


class JobMergedApi(ProjectApi):
    """The PR branch of a PR_OPENED job was merged and shipped as `release` (the service.version of its traces):
    later diagnosis runs watch that release, and the insight is marked fixed (its ticket closed) once its frequency
    there falls under CLEAR_INSIGHT_FIXED_BELOW."""

    class InputSerializer(serializers.Serializer):
        release = serializers.CharField(max_length=200, help_text="the release that ships the merged fix")
        commit = serializers.CharField(max_length=40, required=False, default="", allow_blank=True,
                                       help_text="default: the candidate commit")

    class OutputSerializer(serializers.Serializer):
        insight_id = serializers.IntegerField()
        release = serializers.CharField()
        commit = serializers.CharField()
        status = serializers.CharField(help_text="watching, fixed or reopened")

    @extend_schema(operation_id="evolution_jobs_merged", request=InputSerializer,
                   responses={200: OutputSerializer, 409: CONFLICT})
    def post(self, request: Request, job_id: int) -> Response:
        job = evolution_job_get(project=self.project(request), job_id=job_id)
        values = body_valid(self.InputSerializer, request)
        fix = evolution_job_mark_merged(job=job, user=request_actor(request).get("user"), release=values["release"],
                                        commit=values["commit"])
        return Response(self.OutputSerializer(fix).data)


class JobArtifactApi(ProjectApi):
    """Download one artifact of a job (a plan, review, patch, gate report, trial trace...) as the bytes stored;
    its type is in the job's artifact list (`mime`)."""

    @extend_schema(operation_id="evolution_jobs_artifact", responses={
        (200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request: Request, job_id: int, artifact_id: int) -> HttpResponse:
        project = self.project(request)
        job = evolution_job_get(project=project, job_id=job_id)
        artifact = evolution_artifact_get(project=project, job=job, artifact_id=artifact_id)
        return artifact_response(job=job, artifact=artifact)


def artifact_response(*, job: EvolutionJob, artifact) -> HttpResponse:
    """An artifact as a download, never rendered by the browser: artifacts hold model and trace output."""
    try:
        data = artifact_read(artifact=artifact)
    except FileNotFoundError as exc:
        raise NotFoundError(f"Artifact {artifact.pk}'s file is gone from the artifact store",
                            code="artifact_missing", extra={"sha256": artifact.sha256}) from exc
    response = HttpResponse(data, content_type="application/octet-stream")
    safe_name = "".join(c if c.isalnum() or c in "._-" else "_" for c in artifact.name) or "artifact"
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-{safe_name}"'
    return response
