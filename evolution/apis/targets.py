"""/api/v1/evolution/targets/: register, list, change and remove targets; a hot-swap target's releases and its
rollbacks (asking for one answers every key 403: a person rolls back, in the web UI)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.fields import json_storable
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from evolution.apis.common import PERSON_REQUIRED, body_valid, person_required, request_actor
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


SOURCE_HELP = ("a git URL (https://, ssh:// or user@host:path), or an absolute path under one of the directories the "
               "operator lists in CLEAR_EVOLUTION_SOURCE_ROOTS (not Clear's own, not another project's repository)")
CONFIG_HELP = ("the evolution config. Its commands (install, test, trial, grader, suite, health), sandbox_levels, "
               "hot_swap and scripted_fixtures are the operator's (manage.py evolution_target): a value other than "
               "the stored one is refused here (400 naming config.<field>); left out, they are kept")


class TargetInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    source = serializers.CharField(max_length=MAX_SOURCE_BYTES, help_text=SOURCE_HELP)
    config = serializers.JSONField(required=False, allow_null=True, default=None, validators=[json_storable],
                                   help_text=f"{CONFIG_HELP}. On create the commands and sandbox_levels are the "
                                             "repository's evolution.json's; omitted: that whole file")
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
    """Register a target; the answer comes at once, the target `cloning` while a worker reads the repository
    (within CLEAR_GIT_TIMEOUT_SECONDS), then `ready` or `failed` with `state_reason` (GET it again). Its commands
    and sandbox levels come from the repository's own evolution.json (read at `default_branch`) and run only in the
    sandbox; a config given here may repeat them, not change them (another value ends the target failed, naming
    `config.<field>`). What needs no repository is checked now: 400 evolution_config_invalid with `extra.fields`
    naming every bad field (e.g. `diff_budget.max_files`, `source`, `config.hot_swap`); 409 target_exists for a
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
    target_busy while it has an active job. The commands, sandbox_levels, hot_swap and scripted_fixtures stay as
    stored: left out, kept; sent back unchanged, fine; changed, 400 naming `config.<field>`. A new source or branch,
    or any change to a failed target, puts it back to `cloning` while a worker reads the repository again."""

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
    """Rolling a hot-swap target back takes its live release down: a person does it, logged in as an owner of the
    project, on Evolution → Releases in the web UI (a worker swaps, reloads the agent and re-probes its health; follow
    it on GET .../rollbacks/{rollback_id}/). Every project key gets 403 person_required, before the target is looked
    up."""

    @extend_schema(operation_id="evolution_targets_rollback", request=None, responses={403: PERSON_REQUIRED})
    def post(self, request: Request, target_id: int) -> Response:
        raise person_required(action="roll a target back", page="its release history (Evolution → Releases)")


class TargetRollbackDetailApi(ProjectApi):
    """One rollback of a target: queued, running, then succeeded or failed with the deploy library's detail."""

    @extend_schema(operation_id="evolution_targets_rollback_retrieve", responses=RollbackOutputSerializer)
    def get(self, request: Request, target_id: int, rollback_id: int) -> Response:
        project = self.project(request)
        target = evolution_target_by_id(project=project, target_id=target_id)
        rollback = evolution_rollback_get(project=project, target=target, rollback_id=rollback_id)
        return Response(RollbackOutputSerializer(rollback_status_data(rollback)).data)
