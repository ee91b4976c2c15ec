"""REST API of the diagnosis app (project API keys): start, follow and cancel runs, read feedback, manage rubrics.

One class per operation: validate → service or selector → serialize. Errors are ClearErrors ({message, code, extra}).
"""

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clear.projects.apis import request_project
from clear.projects.authentication import ProjectKeyAuthentication
from diagnosis.models import DiagnosisRun, Feedback, Rubric
from diagnosis.selectors import (
    diagnosis_run_get,
    diagnosis_run_list,
    diagnosis_run_summary,
    feedback_list,
    rubric_get,
    rubric_list,
)
from diagnosis.services import diagnosis_run_cancel, diagnosis_run_start, rubric_create, rubric_delete, rubric_update

_PAGE_MAX = 500


class RunOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = DiagnosisRun
        fields = [
            "id", "name", "status", "continuous", "release", "since", "until", "tags", "outcome", "node",
            "trace_ids", "sample_rate", "judges", "model", "rubric_ids", "budget_tokens", "budget_cost",
            "total_count", "done_count", "skipped_count", "input_tokens", "output_tokens", "cost", "error_count",
            "errors", "dropped_evidence", "failure_message", "created_at", "started_at", "finished_at",
        ]


class FeedbackOutputSerializer(serializers.ModelSerializer):
    trace_id = serializers.CharField(source="trace.trace_id")

    class Meta:
        model = Feedback
        fields = [
            "id", "trace_id", "target_span_id", "judge", "judge_kind", "rubric_id", "model", "prompt_version",
            "status", "score", "verdict", "critique", "issues", "details", "error", "input_tokens", "output_tokens",
            "cost", "latency_ms", "created_at",
        ]


class RubricOutputSerializer(serializers.ModelSerializer):
    kind = serializers.CharField(help_text="regex, jsonpath, tool_order, tool_never, coverage or llm")

    class Meta:
        model = Rubric
        fields = ["id", "name", "description", "kind", "node", "config", "enabled", "created_at", "updated_at"]


def _run_body(run: DiagnosisRun) -> dict:
    summary = diagnosis_run_summary(project=run.project, run=run)
    return {**RunOutputSerializer(run).data, "summary": {
        "feedback_by_status": summary.feedback_by_status, "failing_by_judge": summary.failing_by_judge,
        "failing_traces": summary.failing_traces,
    }}


class DiagnosisRunCreateApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema_serializer(component_name="DiagnosisRunCreateInput")
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
        release = serializers.CharField(required=False, default="", allow_blank=True)
        since = serializers.DateTimeField(required=False, allow_null=True, default=None)
        until = serializers.DateTimeField(required=False, allow_null=True, default=None)
        tags = serializers.ListField(child=serializers.CharField(), required=False, default=list)
        outcome = serializers.ChoiceField(choices=["success", "failure", ""], required=False, default="")
        node = serializers.CharField(required=False, default="", allow_blank=True)
        trace_ids = serializers.ListField(child=serializers.CharField(), required=False, default=list)
        judges = serializers.ListField(child=serializers.CharField(), required=False, default=list)
        model = serializers.CharField(required=False, default="", allow_blank=True)
        rubric_ids = serializers.JSONField(required=False, default="all")
        budget_tokens = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0)
        budget_cost = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0)
        sample_rate = serializers.FloatField(required=False, default=1.0)

    @extend_schema(request=InputSerializer, responses={201: RunOutputSerializer})
    def post(self, request: Request) -> Response:
        project = request_project(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        values["judges"] = values["judges"] or None
        run = diagnosis_run_start(project=project, **values)
        return Response(RunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class DiagnosisRunListApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema(responses=RunOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        runs = diagnosis_run_list(project=request_project(request))[:100]
        return Response(RunOutputSerializer(runs, many=True).data)


class DiagnosisRunDetailApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema(responses=RunOutputSerializer)
    def get(self, request: Request, run_id) -> Response:
        return Response(_run_body(diagnosis_run_get(project=request_project(request), run_id=run_id)))


class DiagnosisRunCancelApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema(request=None, responses=RunOutputSerializer)
    def post(self, request: Request, run_id) -> Response:
        run = diagnosis_run_get(project=request_project(request), run_id=run_id)
        return Response(RunOutputSerializer(diagnosis_run_cancel(run=run)).data)


class FeedbackListApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema_serializer(component_name="FeedbackListFilter")
    class FilterSerializer(serializers.Serializer):
        verdict = serializers.ChoiceField(choices=Feedback.Verdict.values, required=False)
        judge = serializers.CharField(required=False)
        limit = serializers.IntegerField(required=False, default=100, min_value=1, max_value=_PAGE_MAX)
        offset = serializers.IntegerField(required=False, default=0, min_value=0)

    @extend_schema(parameters=[FilterSerializer], responses=FeedbackOutputSerializer(many=True))
    def get(self, request: Request, run_id) -> Response:
        project = request_project(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        run = diagnosis_run_get(project=project, run_id=run_id)
        rows = feedback_list(project=project, run=run, verdict=params.get("verdict"), judge=params.get("judge"))
        page = rows[params["offset"]:params["offset"] + params["limit"]]
        return Response({"count": rows.count(), "results": FeedbackOutputSerializer(page, many=True).data})


class RubricListApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema(responses=RubricOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(RubricOutputSerializer(rubric_list(project=request_project(request)), many=True).data)


class RubricCreateApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema_serializer(component_name="RubricCreateInput")
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=200)
        kind = serializers.CharField(help_text="regex, jsonpath, tool_order, tool_never, coverage or llm")
        config = serializers.JSONField()
        node = serializers.CharField(required=False, default="", allow_blank=True)
        description = serializers.CharField(required=False, default="", allow_blank=True)
        enabled = serializers.BooleanField(required=False, default=True)

    @extend_schema(request=InputSerializer, responses={201: RubricOutputSerializer})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rubric = rubric_create(project=request_project(request), **data.validated_data)
        return Response(RubricOutputSerializer(rubric).data, status=status.HTTP_201_CREATED)


class RubricUpdateApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema_serializer(component_name="RubricUpdateInput")
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=200, required=False)
        kind = serializers.CharField(required=False)
        config = serializers.JSONField(required=False)
        node = serializers.CharField(required=False, allow_blank=True)
        description = serializers.CharField(required=False, allow_blank=True)
        enabled = serializers.BooleanField(required=False)

    @extend_schema(request=InputSerializer, responses=RubricOutputSerializer)
    def post(self, request: Request, rubric_id: int) -> Response:
        rubric = rubric_get(project=request_project(request), rubric_id=rubric_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rubric = rubric_update(rubric=rubric, **data.validated_data)
        return Response(RubricOutputSerializer(rubric).data)


class RubricDeleteApi(APIView):
    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema(request=None, responses={204: None})
    def post(self, request: Request, rubric_id: int) -> Response:
        rubric_delete(rubric=rubric_get(project=request_project(request), rubric_id=rubric_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
