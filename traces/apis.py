"""Ingestion endpoints. They keep the formats their clients expect (OTLP: ExportTraceServiceResponse and
google.rpc.Status in the request's content type; Langfuse: 207 multi-status), not the /api/v1/ error body."""

import json
import logging
import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from clear.errors import ClearError
from traces.normalize import LangfuseBatchError, OtlpDecodeError, decode_export_request, normalize_ingestion_batch
from traces.normalize.otlp import content_kind
from traces.receivers import IngestError, InFlightLimit, UnsupportedMediaType, authenticate, read_body
from traces.services import langfuse_batch_ingest, spans_ingest

logger = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
RETRY_AFTER_SECONDS = "2"
# google.rpc.Code values for the status body.
_RPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


def _otlp_response(kind: str | None, status: int, message: object | None = None) -> HttpResponse:
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
        response["Retry-After"] = RETRY_AFTER_SECONDS
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
            spans_ingest(project=project, spans=batch.spans)
    except ClearError as exc:
        return _otlp_response(kind, exc.status_code, exc.message)
    response = trace_service_pb2.ExportTraceServiceResponse()
    if batch.rejected:
        response.partial_success.rejected_spans = len(batch.rejected)
        reasons = "; ".join(f"span #{index}: {reason}" for index, reason in batch.rejected[:20])
        more = f" (and {len(batch.rejected) - 20} more)" if len(batch.rejected) > 20 else ""
        response.partial_success.error_message = (
            f"{len(batch.rejected)} of {len(batch.rejected) + len(batch.spans)} spans rejected: {reasons}{more}"
        )
    return _otlp_response(kind, 200, response)


def _langfuse_error(status: int, message: str, code: str) -> JsonResponse:
    response = JsonResponse({"message": message, "error": code}, status=status)
    if status in (429, 503):
        response["Retry-After"] = RETRY_AFTER_SECONDS
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
                payload = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise IngestError(f"The body is not valid JSON: {exc}.", code="invalid_json") from None
            try:
                batch = normalize_ingestion_batch(payload=payload)
            except LangfuseBatchError as exc:
                raise IngestError(str(exc), code="invalid_batch") from None
            langfuse_batch_ingest(project=project, batch=batch)
    except ClearError as exc:
        return _langfuse_error(exc.status_code, exc.message, exc.code)
    return JsonResponse(batch.response_body(), status=207)


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
                payload = json.loads(read_body(request))
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
        return _langfuse_error(exc.status_code, exc.message, exc.code)
    if single:
        if batch.errors:
            return _langfuse_error(400, batch.errors[0]["message"], "invalid_score")
        return JsonResponse({"id": items[0]["id"]})
    if batch.errors:
        return JsonResponse({"accepted": len(batch.successes), "rejected": len(batch.errors),
                             "errors": [{"message": error["message"]} for error in batch.errors]}, status=207)
    return JsonResponse({"message": "Accepted"}, status=202)
