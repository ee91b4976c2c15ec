"""Ingestion endpoints, then the REST API of traces (/api/v1/traces/).

The ingestion endpoints keep the formats their clients expect (OTLP: ExportTraceServiceResponse and google.rpc.Status
in the request's content type; Langfuse: 207 multi-status), not the /api/v1/ error body."""

import json
import logging
import uuid
from collections import Counter

from django.conf import settings
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from clear.errors import ClearError, GoneError, NotFoundError, ThrottledError
from clear.projects.models import Project
from traces.models import Span, Trace
from traces.normalize import LangfuseBatchError, OtlpDecodeError, decode_export_request, normalize_ingestion_batch
from traces.normalize.deep_json import TooDeep, loads_bounded
from traces.normalize.otlp import content_kind
from traces.normalize.repair import langfuse_repair_errors
from traces.receivers import IngestError, InFlightLimit, UnsupportedMediaType, authenticate, read_body
from traces.selectors import (
    TraceFilter,
    span_list_for_trace,
    trace_expired_get,
    trace_expired_message,
    trace_get,
    trace_list_filtered,
)
from traces.services import langfuse_batch_ingest, spans_ingest
from traces.services.ingest_issues import ingest_issues_count
from traces.services.lifecycle import trace_delete, trace_outcome_set

logger = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
RETRY_AFTER_SECONDS = "2"
# google.rpc.Code values for the status body.
_RPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


def _retry_after(exc: ClearError) -> str:
    """A throttle knows when it lets the client in again; an overloaded process only asks for a short pause."""
    return str(exc.retry_after) if isinstance(exc, ThrottledError) else RETRY_AFTER_SECONDS


def _otlp_response(kind: str | None, status: int, message: object | None = None,
                   retry_after: str = RETRY_AFTER_SECONDS) -> HttpResponse:
    """`message` is an ExportTraceServiceResponse (success) or an error text (google.rpc.Status)."""
    if status == 200:
        response_message = message or trace_service_pb2.ExportTraceServiceResponse()
    else:
        response_message = status_pb2.Status(code=_RPC_CODES.get(status, 2), message=str(message))
    if kind == "protobuf":
        response = HttpResponse(response_message.SerializeToString(), status=status, content_type=PROTOBUF)
    else:
        from google.protobuf.json_format import MessageToDict

        response = JsonResponse(MessageToDict(response_message), status=status)
    if status in (429, 503):
        response["Retry-After"] = retry_after
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="clear"'
    return response


@csrf_exempt
@require_POST
def otlp_traces(request: HttpRequest) -> HttpResponse:
    kind = content_kind(request.content_type or "")
    try:
        with InFlightLimit():
            project = authenticate(request)
            if kind is None:
                raise UnsupportedMediaType(
                    f"Unsupported Content-Type {request.content_type or '(none)'!r}: OTLP/HTTP traces are "
                    "application/x-protobuf or application/json."
                )
            body = read_body(request)
            try:
                batch = decode_export_request(body=body, content_type=request.content_type)
            except OtlpDecodeError as exc:
                raise IngestError(exc.message, code=exc.kind) from None
            result = spans_ingest(project=project, spans=batch.spans, rejected=batch.rejected)
            if batch.rejected:
                ingest_issues_count(project=project, rejected=Counter(r.reason for r in batch.rejected))
    except ClearError as exc:
        return _otlp_response(kind, exc.status_code, exc.message, retry_after=_retry_after(exc))
    response = trace_service_pb2.ExportTraceServiceResponse()
    messages = []
    if batch.rejected:
        response.partial_success.rejected_spans = len(batch.rejected)
        reasons = "; ".join(f"span #{r.index}: {r.message}" for r in batch.rejected[:20])
        more = f" (and {len(batch.rejected) - 20} more)" if len(batch.rejected) > 20 else ""
        messages.append(
            f"{len(batch.rejected)} of {len(batch.rejected) + len(batch.spans)} spans rejected: {reasons}{more}"
        )
    # Repairs and duplicates alone are reported as the OTLP spec reports warnings: rejected_spans 0, a message.
    summary = result.summary()
    if summary:
        messages.append(summary)
    if messages:
        response.partial_success.error_message = ". ".join(messages)
    return _otlp_response(kind, 200, response)


def _langfuse_error(status: int, message: str, code: str, retry_after: str = RETRY_AFTER_SECONDS) -> JsonResponse:
    response = JsonResponse({"message": message, "error": code}, status=status)
    if status in (429, 503):
        response["Retry-After"] = retry_after
    return response


@csrf_exempt
@require_POST
def langfuse_ingestion(request: HttpRequest) -> HttpResponse:
    try:
        with InFlightLimit():
            project = authenticate(request)
            if content_kind(request.content_type or "") != "json":
                raise UnsupportedMediaType("The Langfuse ingestion API takes application/json.")
            body = read_body(request)
            try:
                payload = loads_bounded(body)
            except TooDeep as exc:
                raise IngestError(f"{exc} Nothing in it can be told apart as an event.", code="invalid_json") from None
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise IngestError(f"The body is not valid JSON: {exc}.", code="invalid_json") from None
            try:
                batch = normalize_ingestion_batch(payload=payload)
            except LangfuseBatchError as exc:
                raise IngestError(str(exc), code="invalid_batch") from None
            result = langfuse_batch_ingest(project=project, batch=batch)
            if batch.rejected:
                ingest_issues_count(project=project, rejected=Counter(r.reason for r in batch.rejected))
    except ClearError as exc:
        return _langfuse_error(exc.status_code, exc.message, exc.code, retry_after=_retry_after(exc))
    body = batch.response_body()
    body["errors"] = [*body["errors"], *langfuse_repair_errors(payload=payload, repaired=result.repaired)]
    return JsonResponse(body, status=207)


@csrf_exempt
@require_POST
def langfuse_scores(request: HttpRequest) -> HttpResponse:
    """`POST /api/public/scores`: a list of scores (SDK v4+, 202/207) or one score (older SDKs, 200 {id})."""
    try:
        with InFlightLimit():
            project = authenticate(request)
            if content_kind(request.content_type or "") != "json":
                raise UnsupportedMediaType("The Langfuse scores API takes application/json.")
            try:
                payload = loads_bounded(read_body(request))
            except TooDeep as exc:
                raise IngestError(str(exc), code="invalid_json") from None
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise IngestError(f"The body is not valid JSON: {exc}.", code="invalid_json") from None
            single = isinstance(payload, dict)
            items = [payload] if single else payload
            if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
                raise IngestError("Send a score object or a list of score objects.", code="invalid_scores")
            for item in items:
                item.setdefault("id", str(uuid.uuid4()))
            events = [{"id": str(uuid.uuid4()), "type": "score-create", "timestamp": timezone.now().isoformat(),
                       "body": item} for item in items]
            batch = normalize_ingestion_batch(payload={"batch": events})
            langfuse_batch_ingest(project=project, batch=batch)
    except ClearError as exc:
        return _langfuse_error(exc.status_code, exc.message, exc.code, retry_after=_retry_after(exc))
    if single:
        if batch.errors:
            return _langfuse_error(400, batch.errors[0]["message"], "invalid_score")
        return JsonResponse({"id": items[0]["id"]})
    if batch.errors:
        return JsonResponse({"accepted": len(batch.successes), "rejected": len(batch.errors),
                             "errors": [{"message": error["message"]} for error in batch.errors]}, status=207)
    return JsonResponse({"message": "Accepted"}, status=202)


# --- REST API (/api/v1/traces/, project API keys) -------------------------------------------------------------------
# One class per operation: validate → selector or service → serialize; errors are ClearErrors.

TRACE_ID_PARAMETER = OpenApiParameter("trace_id", OpenApiTypes.STR, OpenApiParameter.PATH,
                                      description="The trace id (32 hex digits for OTLP traces).")


class TraceNotFoundError(NotFoundError):
    pass


def _trace_or_404(*, project: Project, trace_id: str) -> Trace:
    # Trace ids are at most 32 characters; anything longer or unprintable cannot exist (and a NUL would make
    # Postgres fail rather than find nothing).
    valid = len(trace_id) <= 32 and trace_id.isprintable()
    trace = trace_get(project=project, trace_id=trace_id) if valid else None
    if trace is None:
        expired = trace_expired_get(project=project, trace_id=trace_id) if valid else None
        if expired is not None:
            raise GoneError(trace_expired_message(expired=expired), code="trace_expired")
        raise TraceNotFoundError(f"No trace {trace_id} in this project.")
    return trace


class TraceOutputSerializer(serializers.Serializer):
    trace_id = serializers.CharField()
    name = serializers.CharField()
    start_time = serializers.DateTimeField(allow_null=True)
    end_time = serializers.DateTimeField(allow_null=True)
    status = serializers.CharField(help_text="ok, error or unset")
    span_count = serializers.IntegerField()
    error_count = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost = serializers.FloatField(allow_null=True)
    outcome = serializers.CharField(allow_null=True, help_text="success, failure or null")
    score = serializers.FloatField(allow_null=True)
    outcome_source = serializers.CharField(help_text="root_span, score or api (empty when unknown)")
    task_id = serializers.CharField()
    release = serializers.CharField()
    environment = serializers.CharField()
    session_id = serializers.CharField()
    user_id = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    first_received_at = serializers.DateTimeField()
    finalized_at = serializers.DateTimeField(allow_null=True)
    repaired_spans = serializers.IntegerField(help_text="Spans stored with repairs (see each span's repairs).")
    rejected_spans = serializers.IntegerField(help_text="Spans of this trace refused at ingestion, so missing from it.")
    judged_at = serializers.DateTimeField(allow_null=True, help_text="when diagnosis last started judging the trace")
    changed_since_judged = serializers.BooleanField(
        help_text="a resend or a late span changed the trace after it was judged: the next run judges it again")


def _capped(value) -> tuple[object, bool]:
    """A span's input or output as stored or, past CLEAR_API_SPAN_IO_MAX_CHARS, the start of its JSON text."""
    if value is None:
        return None, False
    limit = settings.CLEAR_API_SPAN_IO_MAX_CHARS
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return value, False
    return text[:limit], True


class SpanOutputSerializer(serializers.Serializer):
    span_id = serializers.CharField()
    parent = serializers.CharField(source="parent_span_id", allow_null=True)
    name = serializers.CharField()
    kind = serializers.CharField(help_text="AGENT, LLM, TOOL, CHAIN, RETRIEVER, EMBEDDING, GUARDRAIL, EVALUATOR, "
                                           "EVENT or SPAN")
    node = serializers.CharField()
    tool_name = serializers.CharField()
    model = serializers.CharField()
    status = serializers.CharField(help_text="ok, error or unset")
    status_message = serializers.CharField()
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField(allow_null=True)
    input_tokens = serializers.IntegerField(allow_null=True)
    output_tokens = serializers.IntegerField(allow_null=True, help_text="Includes reasoning_tokens.")
    cached_tokens = serializers.IntegerField(allow_null=True, help_text="Cache reads, part of input_tokens.")
    reasoning_tokens = serializers.IntegerField(allow_null=True, help_text="Part of output_tokens.")
    cost = serializers.FloatField(allow_null=True)
    input = serializers.JSONField(allow_null=True, help_text="Cut to a string of CLEAR_API_SPAN_IO_MAX_CHARS "
                                                             "characters when longer (input_truncated).")
    output = serializers.JSONField(allow_null=True, help_text="Cut like input (output_truncated).")
    input_truncated = serializers.BooleanField(default=False)
    output_truncated = serializers.BooleanField(default=False)
    repairs = serializers.SerializerMethodField(
        help_text="What ingestion changed to store the span: [{field, reason, original_length}] (issue 24).")

    def get_repairs(self, span: Span) -> list[dict]:
        metadata = span.metadata if isinstance(span.metadata, dict) else {}
        return list(metadata.get("clear.repairs") or [])

    def to_representation(self, span: Span) -> dict:
        data = super().to_representation(span)
        data["parent"] = data["parent"] or None
        for name in ("input", "output"):
            data[name], data[f"{name}_truncated"] = _capped(getattr(span, name))
        return data


class TraceListApi(ProjectApi):
    """Traces of the key's project, newest first."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        release = serializers.CharField(required=False, default="", max_length=200)
        outcome = serializers.ChoiceField(choices=Trace.Outcome.values, required=False, default="")
        node = serializers.CharField(required=False, default="", max_length=300,
                                     help_text="traces with a span of this node")
        since = serializers.DateTimeField(required=False, default=None, help_text="started at or after")
        until = serializers.DateTimeField(required=False, default=None, help_text="started before")
        task_id = serializers.CharField(required=False, default="", max_length=200)

    @extend_schema(operation_id="traces_list", parameters=[FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(TraceOutputSerializer, "PaginatedTraceList"))
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        trace_filter = TraceFilter(release=data["release"] or None, outcome=data["outcome"], node=data["node"],
                                   since=data["since"], until=data["until"], task_id=data["task_id"])
        # Keyset order: traces without spans (no start yet) sort by arrival.
        traces = trace_list_filtered(project=self.project(request), filters=trace_filter).annotate(
            sort_time=Coalesce("start_time", "first_received_at"))
        page = paginate(queryset=traces, request=request, ordering=("-sort_time", "-pk"))
        return Response(page_body(page=page, results=TraceOutputSerializer(page.rows, many=True).data))


class TraceDetailApi(ProjectApi):
    """One trace with its spans (in start order; inputs and outputs cut to CLEAR_API_SPAN_IO_MAX_CHARS)."""

    class OutputSerializer(TraceOutputSerializer):
        root_span_id = serializers.CharField()
        metadata = serializers.DictField()
        spans = SpanOutputSerializer(many=True, source="spans_list")
        spans_truncated = serializers.BooleanField(help_text="true when only the first CLEAR_API_TRACE_MAX_SPANS "
                                                             "spans are listed")

    @extend_schema(operation_id="traces_retrieve", parameters=[TRACE_ID_PARAMETER], responses=OutputSerializer)
    def get(self, request: Request, trace_id: str) -> Response:
        project = self.project(request)
        trace = _trace_or_404(project=project, trace_id=trace_id)
        limit = settings.CLEAR_API_TRACE_MAX_SPANS
        spans = list(span_list_for_trace(project=project, trace=trace)[:limit + 1])
        trace.spans_truncated = len(spans) > limit
        trace.spans_list = spans[:limit]
        return Response(self.OutputSerializer(trace).data)


class TraceDeleteApi(ProjectApi):
    """Delete a trace with its spans, scores, feedback and evidence; runs and insights that counted it are updated."""

    @extend_schema(operation_id="traces_destroy", parameters=[TRACE_ID_PARAMETER], responses={204: None})
    def delete(self, request: Request, trace_id: str) -> Response:
        project = self.project(request)
        trace_delete(project=project, trace=_trace_or_404(project=project, trace_id=trace_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TraceOutcomeApi(ProjectApi):
    """Set a trace's outcome and/or score (0..1). It wins over outcomes from the root span or an outcome score."""

    class InputSerializer(serializers.Serializer):
        outcome = serializers.ChoiceField(choices=Trace.Outcome.values, required=False, allow_null=True,
                                          default=None)
        score = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0, max_value=1,
                                       help_text="0..1; without an outcome, >= 0.5 means success")

        def validate(self, data: dict) -> dict:
            if data.get("outcome") is None and data.get("score") is None:
                raise serializers.ValidationError("Send an outcome (success or failure), a score from 0 to 1, or both.")
            return data

    @extend_schema(operation_id="traces_outcome_create", parameters=[TRACE_ID_PARAMETER], request=InputSerializer,
                   responses=TraceOutputSerializer)
    def post(self, request: Request, trace_id: str) -> Response:
        trace = _trace_or_404(project=self.project(request), trace_id=trace_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        trace = trace_outcome_set(trace=trace, **data.validated_data)
        return Response(TraceOutputSerializer(trace).data)
