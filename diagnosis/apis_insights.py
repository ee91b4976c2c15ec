"""REST API of insights (project API keys): list and read them with their evidence and statements, review them
(confirm, reject, status, merge, split: diagnosis/services/insights_review.py) and compare two runs or releases
(diagnosis/services/compare.py).

One class per operation: look the insight up in the key's project (another project's id is a 404), validate the
body, call the service, serialize. Reviews made with an API key are recorded without a user.
"""

from django.db.models.functions import Coalesce
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.fields import POSTGRES_BIGINT_MAX
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from diagnosis.apis_insight_output import InsightDetailOutputSerializer, InsightOutputSerializer, insight_rows
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.selectors import insight_evidence_list, insight_get, insight_list, insight_statement_list
from diagnosis.selectors.expired_evidence import insight_evidence_expired_list
from diagnosis.services.compare import (
    CHANGES,
    DEFAULT_CONFIDENCE,
    DEFAULT_MIN_DELTA,
    DEFAULT_MIN_TRACES,
    Thresholds,
    compare_run_resolve,
    insights_compare,
)
from diagnosis.services.insights_review import (
    insight_confirm,
    insight_merge,
    insight_reject,
    insight_split,
    insight_status_set,
)


class InsightListApi(ProjectApi):
    """The project's problems, most recently seen first, each with its failure association and its ticket: by
    default one row per problem, a system insight with the node insights it holds in `nodes` (a node insight shared
    by two is under each) and every node insight no listed system insight holds as its own row; `level=node` or
    `level=system` give the flat list of that level. Rejected and merged ones, by-design behaviour and outlier
    findings alone not associated with failure are left out."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        level = serializers.ChoiceField(choices=Insight.Level.values, required=False,
                                        help_text="the flat list of that level (no nesting, no `nodes`)")
        node = serializers.CharField(required=False, max_length=300)
        severity = serializers.ChoiceField(choices=Insight.Severity.values, required=False)
        status = serializers.ChoiceField(choices=Insight.Status.values, required=False)
        review = serializers.ChoiceField(choices=Insight.Review.values, required=False)
        release = serializers.CharField(required=False, max_length=200,
                                        help_text="occurred in traces of it; each row then has `in_release`, its "
                                                  "figures in that release")
        run = serializers.UUIDField(required=False, help_text="occurred in this run")
        include_by_design = serializers.BooleanField(
            required=False, default=False,
            help_text="also list by-design behaviour (by_design: an output its step shows on every call, in "
                      "succeeding and failing runs alike), left out by default")

    @extend_schema(operation_id="insights_list", parameters=[FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(InsightOutputSerializer, "PaginatedInsightList"))
    def get(self, request: Request) -> Response:
        project = self.project(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = dict(filters.validated_data)
        run_id = params.pop("run", None)
        run = DiagnosisRun.objects.filter(project=project, pk=run_id).first() if run_id else None
        nested = not params.get("level")
        insights = insight_list(project=project, run=run, nested=nested, **params).annotate(
            seen=Coalesce("last_seen", "created_at"))
        if run_id and run is None:
            insights = insights.none()  # a run of another project, or none: matches nothing, like any filter value
        page = paginate(queryset=insights, request=request, ordering=("-seen", "-pk"))
        return Response(page_body(page=page, results=insight_rows(project=project, insights=page.rows,
                                                                  nested=nested, release=params.get("release"))))


class InsightDetailApi(ProjectApi):
    """One insight, with its failure association, its ticket and its attribution, as the insight page shows them."""

    @extend_schema(operation_id="insights_retrieve", responses=InsightDetailOutputSerializer)
    def get(self, request: Request, insight_id: int) -> Response:
        insight = insight_get(project=self.project(request), insight_id=insight_id)
        return Response(InsightDetailOutputSerializer(insight).data)


class InsightEvidenceListApi(ProjectApi):
    """Verified citations of an insight: the span (and quote) each statement cites, those from failing traces (agent
    runs) first, then newest first; each says whether its trace failed."""

    is_paginated = True

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        run_id = serializers.UUIDField()
        trace_id = serializers.CharField(source="trace.trace_id")
        span_id = serializers.CharField()
        statement_text = serializers.CharField()
        quote = serializers.CharField(help_text="empty for a bare citation of the span")
        trace_outcome = serializers.CharField(source="trace.outcome", allow_null=True,
                                              help_text="the cited trace's recorded outcome: failure, success or null")
        trace_failed = serializers.SerializerMethodField(
            help_text="whether the agent run (trace) the quote comes from failed; null when no outcome is recorded")
        created_at = serializers.DateTimeField()

        def get_trace_failed(self, evidence) -> bool | None:
            outcome = evidence.trace.outcome
            return None if outcome not in ("failure", "success") else outcome == "failure"

    class ExpiredSerializer(serializers.Serializer):
        run_id = serializers.CharField()
        trace_id = serializers.CharField()
        span_id = serializers.CharField()
        statement_text = serializers.CharField(source="statement")
        quote = serializers.CharField(help_text="empty for a bare citation, or once removed (quote_removed)")
        quote_removed = serializers.BooleanField(
            help_text="the quote went with its trace (CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES off)")
        trace_outcome = serializers.CharField(source="outcome", help_text="failure, success or empty")
        expired_at = serializers.DateTimeField(allow_null=True)
        retention_days = serializers.IntegerField(allow_null=True)

    @extend_schema(operation_id="insights_evidence_list", parameters=PAGINATION_PARAMETERS,
                   responses=inline_serializer(name="PaginatedInsightEvidenceList", fields={
                       "next": serializers.URLField(allow_null=True, help_text="The next page, null on the last one."),
                       "previous": serializers.URLField(allow_null=True,
                                                        help_text="The previous page, null on the first one."),
                       "results": OutputSerializer(many=True),
                       "expired": ExpiredSerializer(many=True, help_text=(
                           "citations of traces retention removed (the newest 100, the same on every page): "
                           "their trace expired, so they link nowhere"))}))
    def get(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        page = paginate(queryset=insight_evidence_list(project=project, insight=insight), request=request,
                        ordering=("outcome_rank", "-pk"))
        expired = insight_evidence_expired_list(project=project, insight=insight)
        return Response({**page_body(page=page, results=self.OutputSerializer(page.rows, many=True).data),
                         "expired": self.ExpiredSerializer(expired, many=True).data})


class InsightStatementListApi(ProjectApi):
    """The statements (one problem a judge reported) an insight holds at its level, e.g. to choose which to split
    off; statements of feedback marked wrong are left out."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        run = serializers.UUIDField(required=False, help_text="statements of this run only")

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        run_id = serializers.UUIDField()
        trace_id = serializers.CharField(source="trace.trace_id")
        span_id = serializers.CharField(help_text="the span the judge blamed; empty for the whole trace")
        node = serializers.CharField()
        judge = serializers.CharField()
        kind = serializers.CharField()
        severity = serializers.CharField()
        text = serializers.CharField()
        created_at = serializers.DateTimeField()

    @extend_schema(operation_id="insights_statements_list", parameters=[FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(OutputSerializer, "PaginatedInsightStatementList"))
    def get(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        statements = insight_statement_list(project=project, insight=insight)
        if "run" in filters.validated_data:
            statements = statements.filter(run_id=filters.validated_data["run"])
        page = paginate(queryset=statements, request=request, ordering=("pk",))
        return Response(page_body(page=page, results=self.OutputSerializer(page.rows, many=True).data))


# --- review actions --------------------------------------------------------------------------------------------------

class NoteInputSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, default="", allow_blank=True, max_length=10_000,
                                 help_text="why (kept with the decision)")


def _valid(serializer_class, request: Request) -> dict:
    data = serializer_class(data=request.data)
    data.is_valid(raise_exception=True)
    return dict(data.validated_data)


class InsightConfirmApi(ProjectApi):
    """A person confirms the pattern is real (kept across later runs)."""

    @extend_schema(operation_id="insights_confirm", request=NoteInputSerializer, responses=InsightOutputSerializer)
    def post(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        values = _valid(NoteInputSerializer, request)
        return Response(InsightOutputSerializer(insight_confirm(project=project, insight=insight, **values)).data)


class InsightRejectApi(ProjectApi):
    """A person says the pattern is not a real problem: hidden from lists, compare and the CI gate; later runs
    that find it again update it without showing it."""

    @extend_schema(operation_id="insights_reject", request=NoteInputSerializer, responses=InsightOutputSerializer)
    def post(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        values = _valid(NoteInputSerializer, request)
        return Response(InsightOutputSerializer(insight_reject(project=project, insight=insight, **values)).data)


class InsightStatusApi(ProjectApi):
    """Set the status: open, acknowledged, fixed (reopened when the pattern comes back) or ignored. Its ticket
    follows."""

    class InputSerializer(NoteInputSerializer):
        status = serializers.ChoiceField(choices=Insight.Status.values)

    @extend_schema(operation_id="insights_status", request=InputSerializer, responses=InsightOutputSerializer)
    def post(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        values = _valid(self.InputSerializer, request)
        return Response(InsightOutputSerializer(insight_status_set(project=project, insight=insight, **values)).data)


class InsightMergeApi(ProjectApi):
    """Fold this insight into another of the same level and node; answers with the insight merged into. This one
    stays as a merged-away record that keeps resolving its pattern to the other in later runs."""

    class InputSerializer(serializers.Serializer):
        into = serializers.IntegerField(min_value=1, max_value=POSTGRES_BIGINT_MAX,
                                        help_text="the id of the insight to merge into")

    @extend_schema(operation_id="insights_merge", request=InputSerializer, responses=InsightOutputSerializer)
    def post(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        source = insight_get(project=project, insight_id=insight_id)
        values = _valid(self.InputSerializer, request)
        target = insight_get(project=project, insight_id=values["into"])
        return Response(InsightOutputSerializer(insight_merge(project=project, source=source, target=target)).data)


class InsightSplitApi(ProjectApi):
    """Move some of the insight's statements (ids from its statements list) to a new insight of the same level and
    node; answers 201 with the new insight. Later runs keep the two apart."""

    class InputSerializer(serializers.Serializer):
        statement_ids = serializers.ListField(
            child=serializers.IntegerField(min_value=1, max_value=POSTGRES_BIGINT_MAX), min_length=1,
            max_length=100_000, help_text="ids from GET /api/v1/insights/{insight_id}/statements/")
        title = serializers.CharField(required=False, default="", allow_blank=True, max_length=300,
                                      help_text="the new insight's title (default: its most typical statement)")

    @extend_schema(operation_id="insights_split", request=InputSerializer, responses={201: InsightOutputSerializer})
    def post(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        values = _valid(self.InputSerializer, request)
        new = insight_split(project=project, insight=insight, **values)
        return Response(InsightOutputSerializer(new).data, status=status.HTTP_201_CREATED)


# --- compare ---------------------------------------------------------------------------------------------------------

class CompareRunSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="run.pk")
    name = serializers.CharField(source="run.name")
    release = serializers.CharField(source="run.release")
    status = serializers.CharField(source="run.status")
    created_at = serializers.DateTimeField(source="run.created_at")
    finished_at = serializers.DateTimeField(source="run.finished_at", allow_null=True)
    judged = serializers.IntegerField(help_text="judged traces of the run")


class CompareSideSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="statements")
    trace_count = serializers.IntegerField(help_text="traces with the insight")
    judged = serializers.IntegerField(help_text="judged traces of the run")
    frequency = serializers.FloatField(help_text="trace_count / judged")


class CompareNestedChangeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="insight.pk")
    level = serializers.CharField(source="insight.level")
    node = serializers.CharField(source="insight.node")
    title = serializers.CharField(source="insight.title")
    change = serializers.ChoiceField(choices=list(CHANGES), help_text="its own change, not counted on its own")
    base = CompareSideSerializer()
    head = CompareSideSerializer()


class CompareChangeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="insight.pk", allow_null=True,
                                  help_text="the insight; null for a pattern of a run that is not full (a CI gate's, "
                                            "sampled, filtered) that no stored insight is")
    level = serializers.CharField(source="insight.level")
    node = serializers.CharField(source="insight.node")
    title = serializers.CharField(source="insight.title")
    severity = serializers.CharField(source="insight.severity")
    status = serializers.CharField(source="insight.status")
    review = serializers.CharField(source="insight.review")
    change = serializers.ChoiceField(choices=list(CHANGES))
    base = CompareSideSerializer()
    head = CompareSideSerializer()
    delta = serializers.FloatField(allow_null=True, help_text="head frequency - base frequency")
    delta_low = serializers.FloatField(allow_null=True, help_text="lower bound of its interval at `confidence`")
    delta_high = serializers.FloatField(allow_null=True, help_text="upper bound of its interval at `confidence`")
    url = serializers.SerializerMethodField()
    nodes = CompareNestedChangeSerializer(
        many=True, help_text="without `level`: the node insights this system insight holds, counted with it (one "
                             "problem, one row); empty for a node insight and with `level`")

    def get_url(self, change) -> str | None:
        return f"/api/v1/insights/{change.insight.pk}/" if change.insight.pk else None


class CompareThresholdsSerializer(serializers.Serializer):
    min_delta = serializers.FloatField()
    confidence = serializers.FloatField()
    min_traces = serializers.IntegerField()


class CompareCountsSerializer(serializers.Serializer):
    new = serializers.IntegerField()
    worse = serializers.IntegerField()
    resolved = serializers.IntegerField()
    better = serializers.IntegerField()
    unchanged = serializers.IntegerField()


class CompareApi(ProjectApi):
    """The insights of a head run against a base run: new, worse, resolved, better and unchanged, with their counts
    and frequencies in both. Each side is a run id or a release (its latest succeeded diagnosis run).

    new: in no base trace, in at least min_traces head traces. resolved: in the base, in no head trace. worse:
    in both, the frequency (traces with it / judged traces) rose by at least min_delta AND the lower bound of the
    Newcombe score interval of the difference (at `confidence`) is above 0; better is the mirror image.
    "Other" buckets, rejected and ignored insights, and outlier findings alone not associated with failure are left
    out. Without `level`, problems are counted: a node insight a system insight of the comparison holds is listed in
    that one's `nodes`, not counted on its own. 409 insights_not_ready until both runs have
    finished and their insights are built (`insights_status` done)."""

    class FilterSerializer(serializers.Serializer):
        base_run = serializers.UUIDField(required=False, help_text="the baseline run")
        head_run = serializers.UUIDField(required=False, help_text="the run under test")
        base_release = serializers.CharField(required=False, max_length=200, allow_blank=True,
                                             help_text="instead of base_run: that release's latest succeeded run")
        head_release = serializers.CharField(required=False, max_length=200, allow_blank=True,
                                             help_text="instead of head_run: that release's latest succeeded run")
        min_delta = serializers.FloatField(required=False, default=DEFAULT_MIN_DELTA, min_value=0, max_value=1,
                                           help_text="smallest frequency change that is worse or better")
        confidence = serializers.FloatField(required=False, default=DEFAULT_CONFIDENCE, min_value=0.5,
                                            max_value=0.999, help_text="of the interval of the frequency change")
        min_traces = serializers.IntegerField(required=False, default=DEFAULT_MIN_TRACES, min_value=1,
                                              max_value=1_000_000,
                                              help_text="head traces an insight needs to count as new")
        level = serializers.ChoiceField(choices=Insight.Level.values, required=False,
                                        help_text="node or system insights only (default both)")

    class OutputSerializer(serializers.Serializer):
        base = CompareRunSerializer()
        head = CompareRunSerializer()
        thresholds = CompareThresholdsSerializer(help_text="as applied")
        counts = CompareCountsSerializer()
        new = CompareChangeSerializer(many=True)
        worse = CompareChangeSerializer(many=True)
        resolved = CompareChangeSerializer(many=True)
        better = CompareChangeSerializer(many=True)
        unchanged = CompareChangeSerializer(many=True)

    @extend_schema(operation_id="compare", parameters=[FilterSerializer],
                   responses={200: OutputSerializer,
                              404: OpenApiResponse(description="a run or release not found in this project"),
                              409: OpenApiResponse(description="insights_not_ready: a run has not finished or its "
                                                               "insights are not built yet; retry")})
    def get(self, request: Request) -> Response:
        project = self.project(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        base = compare_run_resolve(project=project, run_id=params.get("base_run"),
                                   release=params.get("base_release"), side="base")
        head = compare_run_resolve(project=project, run_id=params.get("head_run"),
                                   release=params.get("head_release"), side="head")
        thresholds = Thresholds(min_delta=params["min_delta"], confidence=params["confidence"],
                                min_traces=params["min_traces"])
        comparison = insights_compare(project=project, base_run=base, head_run=head, thresholds=thresholds,
                                      level=params.get("level"))
        return Response(self.OutputSerializer({
            "base": {"run": base, "judged": comparison.base_judged},
            "head": {"run": head, "judged": comparison.head_judged},
            "thresholds": {"min_delta": thresholds.min_delta, "confidence": thresholds.confidence,
                           "min_traces": thresholds.min_traces},
            "counts": comparison.counts,
            **comparison.changes,
        }).data)
