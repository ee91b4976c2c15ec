"""/api/v1/evolution/targets/: register, list, change and remove targets; a hot-swap target's releases and rollback."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.fields import json_storable
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from evolution.apis.common import body_valid, request_actor, request_actor_name
from evolution.selectors import (
    evolution_rollback_get,
    evolution_target_by_id,
    evolution_target_list,
    evolution_target_releases,
    rollback_status_data,
)
from evolution.serializers import TargetOutputSerializer
from evolution.services import evolution_target_update
from evolution.services.api_actions import evolution_target_delete, evolution_target_register
from evolution.services.confinement import MAX_SOURCE_BYTES
from evolution.services.rollbacks import release_rollback_request


SOURCE_HELP = ("a git URL (https://, ssh:// or user@host:path), or an absolute path under one of the directories the "
               "operator lists in CLEAR_EVOLUTION_SOURCE_ROOTS (not Clear's own, not another project's repository)")
CONFIG_HELP = ("the evolution config; hot_swap and scripted_fixtures are the operator's (manage.py evolution_target): "
               "refused here, and kept as they are when a change leaves them out")


class TargetInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    source = serializers.CharField(max_length=MAX_SOURCE_BYTES, help_text=SOURCE_HELP)
    config = serializers.JSONField(required=False, allow_null=True, default=None, validators=[json_storable],
                                   help_text=f"{CONFIG_HELP}; omitted: the repository's evolution.json")
    default_branch = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    push_url = serializers.CharField(max_length=MAX_SOURCE_BYTES, required=False, default="", allow_blank=True,
                                     help_text="where PR branches are pushed (default: the source); confined like "
                                               "the source")


class TargetListApi(ProjectApi):
    """The project's evolution targets (agent repositories Clear may patch), by name."""

    is_paginated = True

    @extend_schema(operation_id="evolution_targets_list", parameters=PAGINATION_PARAMETERS,
                   responses=paginated(TargetOutputSerializer, "PaginatedEvolutionTargetList"))
    def get(self, request: Request) -> Response:
        page = paginate(queryset=evolution_target_list(project=self.project(request)), request=request,
                        ordering=("name", "pk"))
        return Response(page_body(page=page, results=TargetOutputSerializer(page.rows, many=True).data))


class TargetCreateApi(ProjectApi):
    """Register a target. Its config is validated: 400 evolution_config_invalid with `extra.fields` naming every
    bad field (e.g. `trial_command`, `diff_budget.max_files`, `source`, `config.hot_swap`); 409 target_exists for a
    taken name."""

    @extend_schema(operation_id="evolution_targets_create", request=TargetInputSerializer,
                   responses={201: TargetOutputSerializer, 409: OpenApiResponse(description="the name is taken")})
    def post(self, request: Request) -> Response:
        values = body_valid(TargetInputSerializer, request)
        target = evolution_target_register(project=self.project(request), created_by=request_actor(request).get("user"),
                                           **values)
        return Response(TargetOutputSerializer(target).data, status=status.HTTP_201_CREATED)


class TargetDetailApi(ProjectApi):
    """One target."""

    @extend_schema(operation_id="evolution_targets_retrieve", responses=TargetOutputSerializer)
    def get(self, request: Request, target_id: int) -> Response:
        target = evolution_target_by_id(project=self.project(request), target_id=target_id)
        return Response(TargetOutputSerializer(target).data)


class TargetUpdateApi(ProjectApi):
    """Change a target's config, source, default branch or push URL (validated and confined as on create); 400
    target_busy while it has an active job. A config without hot_swap or scripted_fixtures keeps the operator's."""

    class InputSerializer(serializers.Serializer):
        source = serializers.CharField(max_length=MAX_SOURCE_BYTES, required=False, help_text=SOURCE_HELP)
        config = serializers.JSONField(required=False, validators=[json_storable], help_text=CONFIG_HELP)
        default_branch = serializers.CharField(max_length=200, required=False, allow_blank=True)
        push_url = serializers.CharField(max_length=MAX_SOURCE_BYTES, required=False, allow_blank=True)

    @extend_schema(operation_id="evolution_targets_partial_update", request=InputSerializer,
                   responses=TargetOutputSerializer)
    def patch(self, request: Request, target_id: int) -> Response:
        target = evolution_target_by_id(project=self.project(request), target_id=target_id)
        values = body_valid(self.InputSerializer, request)
        return Response(TargetOutputSerializer(evolution_target_update(target=target, **values)).data)


class TargetDeleteApi(ProjectApi):
    """Remove a target that never ran a job (409 target_has_jobs otherwise: its jobs' history stays)."""

    @extend_schema(operation_id="evolution_targets_destroy",
                   responses={204: None, 409: OpenApiResponse(description="the target has jobs")})
    def delete(self, request: Request, target_id: int) -> Response:
        evolution_target_delete(target=evolution_target_by_id(project=self.project(request), target_id=target_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TargetReleasesApi(ProjectApi):
    """A hot-swap target's releases as evolution/deploy records them on disk: what `current` points at, the
    last-good release, a promotion in progress, the releases kept and every swap (newest first)."""

    class OutputSerializer(serializers.Serializer):
        target = inline_serializer(name="EvolutionTargetRef", fields={
            "id": serializers.IntegerField(), "name": serializers.CharField()})
        hot_swap = serializers.BooleanField(help_text="the target's config has a hot_swap section")
        current = serializers.CharField(allow_null=True)
        last_good = serializers.CharField(allow_null=True)
        pending = serializers.DictField(allow_null=True, help_text="{release_id, rollback_to, started_at, reason}")
        releases = serializers.ListField(child=serializers.DictField(),
                                         help_text="[{release_id, staged_at, source, commit, status}]")
        history = serializers.ListField(child=serializers.DictField(),
                                        help_text="[{at, kind, from_release, to_release, reason, health}]")
        error = serializers.CharField(help_text="why the record could not be read, if it could not")

    @extend_schema(operation_id="evolution_targets_releases", responses=OutputSerializer)
    def get(self, request: Request, target_id: int) -> Response:
        project = self.project(request)
        target = evolution_target_by_id(project=project, target_id=target_id)
        record = evolution_target_releases(project=project, target=target)
        state = record.state
        return Response(self.OutputSerializer({
            "target": {"id": target.pk, "name": target.name}, "hot_swap": record.hot_swap, "current": record.current,
            "error": record.error,
            "last_good": state.last_good if state else None,
            "pending": state.pending.to_dict() if state and state.pending else None,
            "releases": [info.to_dict() for info in state.releases.values()] if state else [],
            "history": [swap.to_dict() for swap in state.history] if state else [],
        }).data)


class RollbackOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    target = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["queued", "running", "succeeded", "failed"],
                                     help_text="succeeded: `current` is the release asked for and passed its health "
                                               "probes; failed: refused, or its re-probe failed (see detail)")
    done = serializers.BooleanField()
    from_release = serializers.CharField(allow_blank=True, help_text="what `current` pointed at when asked")
    to_release = serializers.CharField(allow_null=True, help_text="null: the latest healthy earlier release")
    outcome = serializers.CharField(allow_blank=True, help_text="deploy's outcome (rolled_back, failed), or why "
                                                                "it did not run (refused, error, worker_lost)")
    active_release = serializers.CharField(allow_null=True, help_text="what `current` points at after it")
    detail = serializers.CharField(allow_blank=True)
    actor = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class TargetRollbackApi(ProjectApi):
    """Roll a hot-swap target back to `to_release` (default: the most recent healthy release before the current
    one). A worker swaps, reloads the agent and re-probes its health (up to the target's hot_swap.health window);
    the answer is at once, 202 with the rollback to follow on GET .../rollbacks/{id}/. 409 while a job is deploying
    to the target or another rollback of it is queued or running."""

    class InputSerializer(serializers.Serializer):
        to_release = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)

    @extend_schema(operation_id="evolution_targets_rollback", request=InputSerializer,
                   responses={202: RollbackOutputSerializer,
                              409: OpenApiResponse(description="a job is deploying, or a rollback is running")})
    def post(self, request: Request, target_id: int) -> Response:
        target = evolution_target_by_id(project=self.project(request), target_id=target_id)
        values = body_valid(self.InputSerializer, request)
        rollback = release_rollback_request(target=target, to_release=values["to_release"],
                                            user=request_actor(request).get("user"),
                                            actor=request_actor_name(request))
        return Response(RollbackOutputSerializer(rollback_status_data(rollback)).data,
                        status=status.HTTP_202_ACCEPTED)


class TargetRollbackDetailApi(ProjectApi):
    """One rollback of a target: queued, running, then succeeded or failed with the deploy library's detail."""

    @extend_schema(operation_id="evolution_targets_rollback_retrieve", responses=RollbackOutputSerializer)
    def get(self, request: Request, target_id: int, rollback_id: int) -> Response:
        project = self.project(request)
        target = evolution_target_by_id(project=project, target_id=target_id)
        rollback = evolution_rollback_get(project=project, target=target, rollback_id=rollback_id)
        return Response(RollbackOutputSerializer(rollback_status_data(rollback)).data)
