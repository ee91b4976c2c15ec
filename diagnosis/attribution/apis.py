"""GET /api/v1/insights/<id>/attribution/: where the insight's failing traces went wrong (issue 42), as the insight
page's "Where it went wrong" shows it: one blamed agent only when the confident answers agree (`confident`), else
`candidates` with the evidence for each; per trace (`traces`), a confident answer's agent and step, or no agent and
its candidates."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from diagnosis.selectors import insight_get

from .selectors import attribution_summary_for_insight

TRACES_MAX = 50


class AttributionCandidateSerializer(serializers.Serializer):
    agent = serializers.CharField()
    traces = serializers.IntegerField(help_text="attributed traces naming it (a candidate, or a confident answer)")
    first = serializers.IntegerField(help_text="of those, the ones where it is the top candidate")
    mean_share = serializers.FloatField(help_text="its mean share of the method's weight over the attributed traces")
    evidence = serializers.ListField(child=serializers.CharField(), help_text="the evidence most often weighed for it")


class AttributionTraceCandidateSerializer(serializers.Serializer):
    agent = serializers.CharField()
    step = serializers.IntegerField(allow_null=True)
    span_id = serializers.CharField()
    share = serializers.FloatField(allow_null=True)
    evidence = serializers.ListField(child=serializers.CharField())


class TraceAttributionSerializer(serializers.Serializer):
    trace_id = serializers.CharField()
    method = serializers.CharField()
    confident = serializers.BooleanField()
    agent = serializers.CharField(help_text="empty when not confident: no single agent is blamed")
    span_id = serializers.CharField()
    step_index = serializers.IntegerField(allow_null=True)
    confidence = serializers.FloatField(allow_null=True)
    reason = serializers.CharField()
    evidence = serializers.ListField(child=serializers.CharField(), help_text="what a confident answer weighed")
    candidates = AttributionTraceCandidateSerializer(many=True, help_text="when not confident: the top candidates")


class InsightAttributionSerializer(serializers.Serializer):
    failing = serializers.IntegerField(help_text="the insight's failing traces")
    attributed = serializers.IntegerField()
    unattributed = serializers.IntegerField()
    confident = serializers.BooleanField(help_text="whether one agent is blamed: most confident answers name it")
    blamed = serializers.CharField(allow_null=True, help_text="that agent; null when not confident")
    confident_count = serializers.IntegerField()
    unconfident_count = serializers.IntegerField()
    agents = serializers.ListField(child=serializers.DictField(), help_text="[{agent, count, mean_confidence}] over "
                                                                            "the confident answers")
    candidates = AttributionCandidateSerializer(many=True)
    traces = TraceAttributionSerializer(many=True, source="top")


class InsightAttributionApi(ProjectApi):
    @extend_schema(operation_id="insights_attribution", responses=InsightAttributionSerializer)
    def get(self, request: Request, insight_id: int) -> Response:
        project = self.project(request)
        insight = insight_get(project=project, insight_id=insight_id)
        summary = attribution_summary_for_insight(project=project, insight=insight, top=TRACES_MAX)
        return Response(InsightAttributionSerializer(summary).data)
