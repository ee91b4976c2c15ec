"""One error type for the domain, rendered by one handler under /api/v1/ as {"message", "code", "extra"}."""

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

HOW_TO_AUTHENTICATE = (
    "Send 'Authorization: Bearer <secret key>' or HTTP Basic '<public key>:<secret key>'; "
    "create keys under Settings → API keys or with `manage.py create_project`."
)


class ClearError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, code: str | None = None, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.extra = extra or {}


class NotFoundError(ClearError):
    status_code = 404
    code = "not_found"


class GoneError(ClearError):
    status_code = 410
    code = "gone"


class AuthenticationError(ClearError):
    status_code = 401
    code = "not_authenticated"


class ConflictError(ClearError):
    status_code = 409
    code = "conflict"


class ThrottledError(ClearError):
    """429; every renderer of it sends `Retry-After: retry_after` (seconds)."""

    status_code = 429
    code = "throttled"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None,
                 extra: dict[str, Any] | None = None):
        super().__init__(message, code=code, extra={"retry_after": retry_after, **(extra or {})})
        self.retry_after = retry_after


def _flatten_validation_detail(detail: Any) -> str:
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            text = _flatten_validation_detail(value)
            parts.append(text if field == "non_field_errors" else f"{field}: {text}")
        return "; ".join(parts)
    if isinstance(detail, list):
        return " ".join(_flatten_validation_detail(item) for item in detail)
    return str(detail)


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    # Imported here: rest_framework.views loads the authentication classes, which import this module.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, ClearError):
        response = Response({"message": exc.message, "code": exc.code, "extra": exc.extra}, status=exc.status_code)
        if exc.status_code == 401:
            response["WWW-Authenticate"] = 'Bearer realm="clear"'
        if isinstance(exc, ThrottledError):
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, drf_exceptions.NotAuthenticated):
        body = {"message": "Missing API key. " + HOW_TO_AUTHENTICATE, "code": "missing_credentials", "extra": {}}
    elif isinstance(exc, drf_exceptions.ValidationError):
        body = {"message": _flatten_validation_detail(exc.detail), "code": "invalid", "extra": {"fields": exc.detail}}
    elif isinstance(exc, drf_exceptions.APIException):
        codes = exc.get_codes()
        body = {"message": str(exc.detail), "code": codes if isinstance(codes, str) else "error", "extra": {}}
    else:  # pragma: no cover - DRF only returns responses for APIException subclasses
        body = {"message": str(exc), "code": "error", "extra": {}}
    response.data = body
    return response
