"""The ingestion endpoints in the OpenAPI schema (a SPECTACULAR_SETTINGS postprocessing hook).

They are plain Django views (traces/apis.py), which drf-spectacular does not see, and answer in the formats their
clients expect (OTLP/HTTP, Langfuse), not the /api/v1/ error body; this hook describes them by hand. Kept out of the
schemathesis run over /api/v1/ (tests/api/test_schemathesis.py selects /api/v1/ paths only): the ingestion fuzz
tests (tests/traces/test_ingest_fuzz.py and others) cover their inputs.
"""

from django.conf import settings

PROTOBUF = "application/x-protobuf"
RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait before resending."}}
TAG = "ingestion"

_KEY_VALUE = {"type": "object", "properties": {"key": {"type": "string"}, "value": {
    "type": "object", "description": "AnyValue: one of stringValue, intValue, doubleValue, boolValue, arrayValue, "
                                    "kvlistValue, bytesValue", "additionalProperties": True}}}
_ATTRIBUTES = {"type": "array", "items": _KEY_VALUE}
_OTLP_SPAN = {"type": "object", "additionalProperties": True, "properties": {
    "traceId": {"type": "string", "description": "32 hex digits (OTLP/JSON encodes ids as hex, not base64)"},
    "spanId": {"type": "string", "description": "16 hex digits"},
    "parentSpanId": {"type": "string", "description": "16 hex digits; empty for a root span"},
    "name": {"type": "string"},
    "kind": {"type": "integer", "description": "SpanKind (0-5)"},
    "startTimeUnixNano": {"type": "string", "description": "nanoseconds since the epoch (a string or an integer)"},
    "endTimeUnixNano": {"type": "string"},
    "attributes": {**_ATTRIBUTES, "description": "OpenInference, OpenLLMetry / GenAI semantic conventions and "
                                                 "clear.* attributes (clear.node, clear.outcome, clear.task_id…)"},
    "events": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
    "status": {"type": "object", "properties": {"code": {"type": "integer", "description": "0 unset, 1 ok, 2 error"},
                                                "message": {"type": "string"}}},
}}
OTLP_REQUEST = {"type": "object", "description": "ExportTraceServiceRequest (OTLP/HTTP, JSON encoding)",
                "properties": {"resourceSpans": {"type": "array", "items": {"type": "object", "properties": {
                    "resource": {"type": "object", "properties": {"attributes": _ATTRIBUTES}},
                    "scopeSpans": {"type": "array", "items": {"type": "object", "properties": {
                        "scope": {"type": "object", "additionalProperties": True},
                        "spans": {"type": "array", "items": _OTLP_SPAN}}}}}}}},
                "required": ["resourceSpans"]}
OTLP_RESPONSE = {"type": "object", "description": "ExportTraceServiceResponse: empty when every span was stored",
                 "properties": {"partialSuccess": {"type": "object", "properties": {
                     "rejectedSpans": {"type": "string", "description": "spans refused (int64, a string in JSON)"},
                     "errorMessage": {"type": "string", "description": "why each span was refused; also repairs "
                                                                       "and duplicates, with rejectedSpans 0"}}}}}
RPC_STATUS = {"type": "object", "description": "google.rpc.Status",
              "properties": {"code": {"type": "integer", "description": "google.rpc.Code"},
                             "message": {"type": "string", "description": "what went wrong"}}}
LANGFUSE_ERROR = {"type": "object", "properties": {
    "message": {"type": "string"},
    "error": {"type": "string", "description": "a code: invalid_json, invalid_batch, invalid_scores, invalid_score, "
                                               "missing_credentials, invalid_credentials, payload_too_large, "
                                               "unsupported_media_type, auth_throttled, overloaded…"}}}
_EVENT_TYPES = ["trace-create", "span-create", "span-update", "generation-create", "generation-update",
                "event-create", "agent-create", "tool-create", "chain-create", "retriever-create", "evaluator-create",
                "embedding-create", "guardrail-create", "observation-create", "score-create", "sdk-log"]
LANGFUSE_BATCH = {"type": "object", "required": ["batch"], "properties": {
    "batch": {"type": "array", "items": {"type": "object", "required": ["id", "type", "body"], "properties": {
        "id": {"type": "string", "description": "the event's id, echoed in successes and errors"},
        "type": {"type": "string", "enum": _EVENT_TYPES, "description": "and the other *-update types"},
        "timestamp": {"type": "string", "format": "date-time"},
        "body": {"type": "object", "additionalProperties": True,
                 "description": "the trace, observation or score as the Langfuse SDK sends it (id, traceId, name, "
                                "input, output, metadata, startTime, …)"}}}},
    "metadata": {"type": "object", "additionalProperties": True}}}
LANGFUSE_MULTI_STATUS = {"type": "object", "properties": {
    "successes": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "string"}, "status": {"type": "integer", "enum": [201]}}}},
    "errors": {"type": "array", "description": "refused events (status 400), and events stored with repairs (status "
                                               "201, error \"Repaired\")",
               "items": {"type": "object", "properties": {
                   "id": {"type": "string"}, "status": {"type": "integer"}, "message": {"type": "string"},
                   "error": {"type": "string"}}}}}}
SCORE = {"type": "object", "required": ["traceId", "name"], "additionalProperties": True, "properties": {
    "id": {"type": "string", "description": "scores are upserted by it; generated when missing"},
    "traceId": {"type": "string"}, "observationId": {"type": "string", "nullable": True},
    "name": {"type": "string", "description": "an outcome score (e.g. `outcome`) sets the trace's outcome"},
    "value": {"description": "a number, or a string for categorical scores"},
    "dataType": {"type": "string", "enum": ["NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT", "CORRECTION"]},
    "comment": {"type": "string", "nullable": True}}}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _otlp_error(description: str, headers: dict | None = None) -> dict:
    response = {"description": description, "content": {**_json(RPC_STATUS), PROTOBUF: {
        "schema": {"type": "string", "format": "binary", "description": "google.rpc.Status"}}}}
    return {**response, "headers": headers} if headers else response


def _langfuse_error(description: str, headers: dict | None = None) -> dict:
    response = {"description": description, "content": _json(LANGFUSE_ERROR)}
    return {**response, "headers": headers} if headers else response


def _common_errors(error) -> dict:
    cap = settings.CLEAR_INGEST_MAX_BODY_BYTES
    return {
        "401": error("The key is missing, malformed, unknown or revoked.",
                     {"WWW-Authenticate": {"schema": {"type": "string"}}} if error is _otlp_error else None),
        "413": error(f"The body is larger than CLEAR_INGEST_MAX_BODY_BYTES ({cap} bytes), before or after "
                     "decompression."),
        "415": error("Unsupported Content-Type or Content-Encoding (gzip, deflate or none)."),
        "429": error("Too many wrong keys from this client address; retry after Retry-After.", RETRY_AFTER),
        "503": error("The process is at CLEAR_INGEST_MAX_IN_FLIGHT concurrent ingestions; retry after Retry-After.",
                     RETRY_AFTER),
    }


def _otlp_operation(operation_id: str, summary: str) -> dict:
    return {"post": {
        "operationId": operation_id, "tags": [TAG], "summary": summary,
        "description": "OTLP/HTTP trace export, protobuf or JSON (optionally gzip- or deflate-compressed). Spans of "
                       "a trace may arrive over several requests; resent spans are de-duplicated. Each span is "
                       "checked on its own: refused ones are counted in partialSuccess, the others stored. Answers "
                       "in the request's encoding.",
        "security": [{"projectKey": []}, {"projectKeyBasic": []}],
        "requestBody": {"required": True, "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary",
                                  "description": "ExportTraceServiceRequest (protobuf)"}},
            **_json(OTLP_REQUEST)}},
        "responses": {
            "200": {"description": "Stored; partialSuccess lists the spans refused, repaired or duplicated.",
                    "content": {**_json(OTLP_RESPONSE), PROTOBUF: {"schema": {
                        "type": "string", "format": "binary", "description": "ExportTraceServiceResponse"}}}},
            "400": _otlp_error("The body cannot be decoded as an ExportTraceServiceRequest."),
            **_common_errors(_otlp_error),
        },
    }}


def _langfuse_ingestion() -> dict:
    return {"post": {
        "operationId": "langfuse_ingestion", "tags": [TAG], "summary": "Langfuse ingestion batch",
        "description": "The Langfuse SDKs' batch endpoint: traces, observations and scores as events. Each event is "
                       "checked on its own; the answer is 207 with the events stored and refused.",
        "security": [{"projectKeyBasic": []}, {"projectKey": []}],
        "requestBody": {"required": True, "content": _json(LANGFUSE_BATCH)},
        "responses": {
            "207": {"description": "Per event: stored (successes) or refused (errors, status 400).",
                    "content": _json(LANGFUSE_MULTI_STATUS)},
            "400": _langfuse_error("The body is not JSON, or has no `batch` array."),
            **_common_errors(_langfuse_error),
        },
    }}


def _langfuse_scores() -> dict:
    return {"post": {
        "operationId": "langfuse_scores", "tags": [TAG], "summary": "Langfuse scores",
        "description": "One score (older SDKs; answers 200 with its id) or a list of scores (SDK v4+; 202 when all "
                       "are stored, 207 when some are refused).",
        "security": [{"projectKeyBasic": []}, {"projectKey": []}],
        "requestBody": {"required": True, "content": _json({"oneOf": [SCORE, {"type": "array", "items": SCORE}]})},
        "responses": {
            "200": {"description": "The one score sent is stored.",
                    "content": _json({"type": "object", "properties": {"id": {"type": "string"}}})},
            "202": {"description": "Every score of the list is stored.", "content": _json(
                {"type": "object", "properties": {"message": {"type": "string", "enum": ["Accepted"]}}})},
            "207": {"description": "Some scores of the list are refused.", "content": _json({
                "type": "object", "properties": {
                    "accepted": {"type": "integer"}, "rejected": {"type": "integer"},
                    "errors": {"type": "array", "items": {"type": "object",
                                                          "properties": {"message": {"type": "string"}}}}}})},
            "400": _langfuse_error("The body is not JSON, not a score or list of scores, or the one score sent is "
                                   "not valid."),
            **_common_errors(_langfuse_error),
        },
    }}


def ingestion_paths_hook(result: dict, generator, request, public) -> dict:
    """Add the ingestion endpoints (traces/urls.py) and the HTTP Basic form of the project key."""
    schemes = result.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes.setdefault("projectKeyBasic", {
        "type": "http", "scheme": "basic",
        "description": "'<public key>:<secret key>', as the Langfuse SDKs send them (pk-clear-… / sk-clear-…)."})
    paths = result.setdefault("paths", {})
    paths["/v1/traces"] = _otlp_operation("otlp_traces", "OTLP/HTTP traces")
    paths["/api/public/otel/v1/traces"] = _otlp_operation("langfuse_otlp_traces",
                                                          "OTLP/HTTP traces (Langfuse's OTel path)")
    paths["/api/public/ingestion"] = _langfuse_ingestion()
    paths["/api/public/scores"] = _langfuse_scores()
    return result
