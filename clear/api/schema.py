"""OpenAPI additions: the error body every /api/v1/ operation can answer (a SPECTACULAR_SETTINGS postprocessing hook).

The project-key security scheme is in clear/projects/schema.py.
"""

import drf_spectacular.openapi

API_PREFIX = "/api/v1/"

ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error under /api/v1/ has this body.",
    "properties": {
        "message": {"type": "string", "description": "What went wrong and what to do about it."},
        "code": {"type": "string", "description": "A stable machine-readable code, e.g. not_found, throttled."},
        "extra": {"type": "object", "additionalProperties": True, "description": "Details, e.g. invalid fields."},
    },
    "required": ["message", "code", "extra"],
}

_ERRORS = {
    "400": ("The request is not valid (body, query parameters or cursor); a query parameter the operation does not "
            "list is refused (code unknown_parameter), naming the ones it accepts."),
    "401": "The API key is missing, malformed, unknown or revoked.",
    "404": "No such object in the key's project.",
    "429": ("Too many requests for this API key (CLEAR_API_RATE), or too many wrong keys from this client address "
            "(CLEAR_AUTH_FAILURE_RATE, code auth_throttled); retry after `Retry-After` seconds."),
}


def error_responses_hook(result: dict, generator, request, public) -> dict:
    """Document the {message, code, extra} error responses on every /api/v1/ operation (drf-spectacular
    postprocessing hook), so clients and schema checks know each status they can meet."""
    components = result.setdefault("components", {})
    components.setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith(API_PREFIX):
            continue
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for status, description in _ERRORS.items():
                if status == "404" and "{" not in path:
                    continue
                response = responses.setdefault(status, {"description": description})
                response.setdefault("content", error)
            for status, response in responses.items():
                if status.startswith("4") and isinstance(response, dict):
                    response.setdefault("content", error)  # e.g. a 409 an operation declares with a description
            responses["429"].setdefault("headers", {"Retry-After": {
                "schema": {"type": "integer"}, "description": "Seconds to wait before the next request."}})
    return result


class AutoSchema(drf_spectacular.openapi.AutoSchema):
    """Names nested serializers after their API class: `TraceDetailApi.OutputSerializer` → `TraceDetailOutput`
    (every API class has its own InputSerializer / OutputSerializer, which would otherwise all be "Output")."""

    def get_serializer_name(self, serializer, direction) -> str:
        qualname = type(serializer).__qualname__
        outer, _, inner = qualname.rpartition(".")
        if outer and "<locals>" not in outer:
            return outer.rpartition(".")[2].removesuffix("Api") + inner
        return super().get_serializer_name(serializer, direction)
