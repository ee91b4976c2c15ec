"""REST API of the diagnosis app (project API keys): start, follow and cancel runs, read feedback, manage rubrics.

One class per operation: validate → service or selector → serialize. Errors are ClearErrors ({message, code, extra}).
The /api/v1/runs/, /api/v1/feedback/ and /api/v1/rubrics/ endpoints follow the shared conventions (clear/api: cursor
pages, per-key rate limit). Insights, their review and compare: apis_insights.py.
"""

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.fields import POSTGRES_BIGINT_MAX, json_storable
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from diagnosis.errors import DiagnosisRunInvalidError
from diagnosis.models import DiagnosisRun, Feedback, Rubric
from diagnosis.selectors import (
    diagnosis_run_get,
    diagnosis_run_list,
    diagnosis_run_reusable,
    diagnosis_run_summary,
    feedback_list,
    rubric_get,
    rubric_list,
)
from diagnosis.services import (
    diagnosis_run_cancel, diagnosis_run_retry_errors, diagnosis_run_start, rubric_create, rubric_delete, rubric_update,
)


class RunOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = DiagnosisRun
        fields = [
            "id", "name", "status", "continuous", "release", "since", "until", "tags", "outcome", "node",
            "trace_ids", "sample_rate", "judges", "model", "rubric_ids", "budget_tokens", "budget_cost",
            "total_count", "done_count", "skipped_count", "input_tokens", "output_tokens", "cost", "error_count",
            "errors", "dropped_evidence", "failure_message", "created_at", "started_at", "finished_at", "purpose",
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


# --- /api/v1/runs/, /api/v1/feedback/, /api/v1/rubrics/ (shared conventions: clear/api) ------------------------------

@extend_schema_field({"oneOf": [{"type": "string", "enum": ["all"]},
                                {"type": "array", "items": {"type": "integer", "minimum": 1}}]})
class RubricIdsField(serializers.Field):
    """`"all"` (every enabled rubric) or a list of rubric ids."""

    default_error_messages = {"invalid": 'Expected "all" or a list of rubric ids.'}

    def to_internal_value(self, data):
        if data == "all":
            return data
        if not isinstance(data, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 < i <= POSTGRES_BIGINT_MAX for i in data):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class RunProgressSerializer(serializers.Serializer):
    total = serializers.IntegerField(help_text="traces chosen by the filter")
    done = serializers.IntegerField(help_text="traces judged")
    skipped = serializers.IntegerField(help_text="traces not judged (cancelled, budget, crash)")
    fraction = serializers.FloatField(help_text="(done + skipped) / total; 1 for an empty run")
    finished = serializers.BooleanField()


class RunErrorGroupSerializer(serializers.Serializer):
    cause = serializers.CharField(help_text="timeout, connection, rate_limit, server_error, invalid_output, "
                                            "invalid_output:length, invalid_output:echo, invalid_output:refusal, "
                                            "invalid_output:inconsistent, "
                                            "provider_error, judge_error, task_failed, …")
    count = serializers.IntegerField()
    judges = serializers.ListField(child=serializers.CharField())
    traces = serializers.IntegerField()
    example = serializers.CharField()


class JudgeCauseSerializer(serializers.Serializer):
    cause = serializers.CharField()
    count = serializers.IntegerField()


class JudgeWithoutVerdictSerializer(serializers.Serializer):
    judge = serializers.CharField()
    errors = serializers.IntegerField()
    calls = serializers.IntegerField(help_text="model calls asked of it (0 for a judge without a model)")
    causes = JudgeCauseSerializer(many=True)
    label = serializers.CharField(help_text='"llm.step produced no verdict: 8 of 8 model calls failed (…)"')


class RunSummarySerializer(serializers.Serializer):
    feedback_by_status = serializers.DictField(child=serializers.IntegerField())
    failing_by_judge = serializers.DictField(child=serializers.IntegerField())
    failing_traces = serializers.IntegerField()
    model_calls = serializers.IntegerField(help_text="judgements a model was asked for")
    model_call_errors = serializers.IntegerField(help_text="of those, the ones that ended in an error")
    errors_label = serializers.CharField(help_text='"finished with errors (N of M model calls)", or empty')
    errors_by_cause = RunErrorGroupSerializer(many=True)
    judges_without_verdict = JudgeWithoutVerdictSerializer(
        many=True, help_text="requested judges that produced errors and no verdict: the run failed because of them")


def _run_progress(run: DiagnosisRun) -> dict:
    settled = run.done_count + run.skipped_count
    return {"total": run.total_count, "done": run.done_count, "skipped": run.skipped_count,
            "fraction": min(1.0, settled / run.total_count) if run.total_count else 1.0,
            "finished": run.is_finished}


class RunApiOutputSerializer(RunOutputSerializer):
    progress = serializers.SerializerMethodField()
    insights_status = serializers.ChoiceField(
        choices=["", "queued", "running", "done", "failed"],
        help_text="the insights build after the run: empty (not requested yet), queued, running, done, failed; "
                  "runs can be compared once it is done")

    class Meta(RunOutputSerializer.Meta):
        fields = [*RunOutputSerializer.Meta.fields, "progress", "insights_status"]

    @extend_schema_field(RunProgressSerializer)
    def get_progress(self, run: DiagnosisRun) -> dict:
        return _run_progress(run)


class RunListApi(ProjectApi):
    """Diagnosis runs of the key's project, newest first."""

    is_paginated = True

    @extend_schema(operation_id="runs_list", parameters=PAGINATION_PARAMETERS,
                   responses=paginated(RunApiOutputSerializer, "PaginatedRunList"))
    def get(self, request: Request) -> Response:
        page = paginate(queryset=diagnosis_run_list(project=self.project(request)), request=request,
                        ordering=("-created_at", "-pk"))
        return Response(page_body(page=page, results=RunApiOutputSerializer(page.rows, many=True).data))


class RunCreateApi(ProjectApi):
    """Start a diagnosis run: the filter chooses the traces, the judges and budget say how they are judged."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
        release = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
        since = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                          help_text="traces started at or after")
        until = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                          help_text="traces started before")
        tags = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list,
                                     help_text="traces carrying all these tags")
        outcome = serializers.ChoiceField(choices=["success", "failure", ""], required=False, default="")
        node = serializers.CharField(required=False, default="", allow_blank=True, max_length=300,
                                     help_text="traces with a span of this node")
        trace_ids = serializers.ListField(child=serializers.CharField(max_length=32), required=False, default=list,
                                          max_length=100_000)
        judges = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list,
                                       help_text="judge names or aliases (rules, rubrics, llm); empty: the defaults")
        model = serializers.CharField(required=False, default="", allow_blank=True, max_length=300,
                                      help_text="LLM judge model (default CLEAR_JUDGE_MODEL)")
        rubric_ids = RubricIdsField(required=False, default="all")
        budget_tokens = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0,
                                                 max_value=POSTGRES_BIGINT_MAX)
        budget_cost = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0)
        sample_rate = serializers.FloatField(required=False, default=1.0, min_value=0, max_value=1,
                                             help_text="share of the chosen traces judged, in (0, 1]")
        purpose = serializers.ChoiceField(
            choices=DiagnosisRun.Purpose.choices, required=False, default=DiagnosisRun.Purpose.DIAGNOSIS,
            help_text='"gate" for a CI comparison (clearctl gate): its figures never replace the insights\' headline '
                      "figures, which come from the latest full diagnosis run of the newest release")
        reuse = serializers.BooleanField(
            required=False, default=False,
            help_text="with only a release as the filter: answer 200 with the newest queued, running or succeeded "
                      "run of that release and the same judge configuration (judges, model, rubrics) instead of "
                      "starting one, unless traces of the release arrived after it was created (CI re-runs)")

    @extend_schema(operation_id="runs_create", request=InputSerializer,
                   responses={201: RunApiOutputSerializer,
                              200: OpenApiResponse(RunApiOutputSerializer, description="an existing run reused")})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        values["judges"] = values["judges"] or None
        project = self.project(request)
        if values.pop("reuse"):
            plain = not any(values[k] for k in ("since", "until", "tags", "outcome", "node", "trace_ids")) \
                and values["sample_rate"] == 1
            if not plain:
                raise DiagnosisRunInvalidError("reuse works with a release filter only (no since, until, tags, "
                                               "outcome, node, trace_ids or sampling); drop the other filters or "
                                               "reuse")
            reused = diagnosis_run_reusable(project=project, release=values["release"], judges=values["judges"],
                                            model=values["model"], rubric_ids=values["rubric_ids"])
            if reused is not None:
                return Response(RunApiOutputSerializer(reused).data, status=status.HTTP_200_OK)
        run = diagnosis_run_start(project=project, **values)
        run.refresh_from_db()  # eager tasks (tests, inline) may have run it already
        return Response(RunApiOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class RunDetailApi(ProjectApi):
    """One run with its progress and a summary of its feedback."""

    class OutputSerializer(RunApiOutputSerializer):
        summary = serializers.SerializerMethodField()

        class Meta(RunApiOutputSerializer.Meta):
            fields = [*RunApiOutputSerializer.Meta.fields, "summary"]

        @extend_schema_field(RunSummarySerializer)
        def get_summary(self, run: DiagnosisRun) -> dict:
            summary = diagnosis_run_summary(project=run.project, run=run)
            return {"feedback_by_status": summary.feedback_by_status, "failing_by_judge": summary.failing_by_judge,
                    "failing_traces": summary.failing_traces, "contrastive": summary.contrastive,
                    "model_calls": summary.model_calls, "model_call_errors": summary.model_call_errors,
                    "errors_label": summary.errors_label, "errors_by_cause": summary.errors_by_cause,
                    "judges_without_verdict": summary.judges_without_verdict}

    @extend_schema(operation_id="runs_retrieve", responses=OutputSerializer)
    def get(self, request: Request, run_id) -> Response:
        run = diagnosis_run_get(project=self.project(request), run_id=run_id)
        return Response(self.OutputSerializer(run).data)


class RunCancelApi(ProjectApi):
    """Stop a queued or running run: traces not started are skipped. 409 when it has finished already."""

    @extend_schema(operation_id="runs_cancel", request=None,
                   responses={200: RunApiOutputSerializer, 409: OpenApiResponse(description="finished already")})
    def post(self, request: Request, run_id) -> Response:
        run = diagnosis_run_get(project=self.project(request), run_id=run_id)
        return Response(RunApiOutputSerializer(diagnosis_run_cancel(run=run)).data)


class RunRetryErrorsApi(ProjectApi):
    """Start a run over the traces of a finished run whose judging errored (same judges, model, rubrics, budget).
    400 when none errored or the run has not finished."""

    @extend_schema(operation_id="runs_retry_errors", request=None, responses={201: RunApiOutputSerializer})
    def post(self, request: Request, run_id) -> Response:
        run = diagnosis_run_get(project=self.project(request), run_id=run_id)
        retry = diagnosis_run_retry_errors(run=run)
        retry.refresh_from_db()
        return Response(RunApiOutputSerializer(retry).data, status=status.HTTP_201_CREATED)


class FeedbackRowSerializer(FeedbackOutputSerializer):
    run_id = serializers.UUIDField()

    class Meta(FeedbackOutputSerializer.Meta):
        fields = ["id", "run_id", *FeedbackOutputSerializer.Meta.fields[1:]]


class FeedbackListApi(ProjectApi):
    """Judges' feedback in the key's project, oldest first; filter by run, trace, judge and verdict."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        run = serializers.UUIDField(required=False)
        trace = serializers.CharField(required=False, max_length=32, help_text="a trace id")
        judge = serializers.CharField(required=False, max_length=200)
        verdict = serializers.ChoiceField(choices=Feedback.Verdict.values, required=False)

    @extend_schema(operation_id="feedback_list", parameters=[FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(FeedbackRowSerializer, "PaginatedFeedbackList"))
    def get(self, request: Request) -> Response:
        project = self.project(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        rows = feedback_list(project=project, verdict=params.get("verdict"), judge=params.get("judge"))
        # A run or trace that is not in this project matches nothing, like any other filter value.
        if "run" in params:
            rows = rows.filter(run_id=params["run"])
        if "trace" in params:
            rows = rows.filter(trace__trace_id=params["trace"].lower())
        page = paginate(queryset=rows, request=request, ordering=("pk",))
        return Response(page_body(page=page, results=FeedbackRowSerializer(page.rows, many=True).data))


class RubricInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=Rubric.Kind.values)
    config = serializers.JSONField(validators=[json_storable], help_text="kind-specific, see diagnosis/RUNS.md")
    node = serializers.CharField(required=False, default="", allow_blank=True, max_length=300,
                                 help_text="limit the rubric to this node's spans")
    description = serializers.CharField(required=False, default="", allow_blank=True, max_length=10_000)
    enabled = serializers.BooleanField(required=False, default=True)


class RubricListApi(ProjectApi):
    """The project's rubrics by name."""

    is_paginated = True

    @extend_schema(operation_id="rubrics_list", parameters=PAGINATION_PARAMETERS,
                   responses=paginated(RubricOutputSerializer, "PaginatedRubricList"))
    def get(self, request: Request) -> Response:
        page = paginate(queryset=rubric_list(project=self.project(request)), request=request,
                        ordering=("name", "pk"))
        return Response(page_body(page=page, results=RubricOutputSerializer(page.rows, many=True).data))


class RubricCreateApi(ProjectApi):
    """Add a rubric; its config is checked for its kind (400 rubric_invalid, rubric_exists for a taken name)."""

    @extend_schema(operation_id="rubrics_create", request=RubricInputSerializer,
                   responses={201: RubricOutputSerializer})
    def post(self, request: Request) -> Response:
        data = RubricInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rubric = rubric_create(project=self.project(request), **data.validated_data)
        return Response(RubricOutputSerializer(rubric).data, status=status.HTTP_201_CREATED)


class RubricDetailApi(ProjectApi):
    """One rubric."""

    @extend_schema(operation_id="rubrics_retrieve", responses=RubricOutputSerializer)
    def get(self, request: Request, rubric_id: int) -> Response:
        return Response(RubricOutputSerializer(rubric_get(project=self.project(request), rubric_id=rubric_id)).data)


class RubricUpdateApi(ProjectApi):
    """Change some of a rubric's fields (a new kind or config is validated together)."""

    @extend_schema(operation_id="rubrics_partial_update", request=RubricInputSerializer(partial=True),
                   responses=RubricOutputSerializer)
    def patch(self, request: Request, rubric_id: int) -> Response:
        rubric = rubric_get(project=self.project(request), rubric_id=rubric_id)
        data = RubricInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        rubric = rubric_update(rubric=rubric, **data.validated_data)
        return Response(RubricOutputSerializer(rubric).data)


class RubricDeleteApi(ProjectApi):
    """Delete a rubric (its past feedback stays, without the link)."""

    @extend_schema(operation_id="rubrics_destroy", responses={204: None})
    def delete(self, request: Request, rubric_id: int) -> Response:
        rubric_delete(rubric=rubric_get(project=self.project(request), rubric_id=rubric_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
