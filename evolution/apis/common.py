"""What the evolution API modules share: id bounds, the 409 response, body validation and the acting user or key."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework.request import Request

from clear.api.fields import POSTGRES_BIGINT_MAX
from clear.projects.authentication import ProjectKeyUser

ID = {"min_value": 1, "max_value": POSTGRES_BIGINT_MAX}
CONFLICT = OpenApiResponse(description="the job is not in a state that allows this")


def body_valid(serializer_class, request: Request, **kwargs) -> dict:
    data = serializer_class(data=request.data, **kwargs)
    data.is_valid(raise_exception=True)
    return dict(data.validated_data)


def request_actor(request: Request) -> dict:
    """Who acts: {"user": ...} for a session, {"api_key": ...} for a project key."""
    if isinstance(request.user, ProjectKeyUser):
        return {"api_key": request.user.api_key}
    return {"user": request.user}


def request_actor_name(request: Request) -> str:
    who = request_actor(request)
    return f"api_key:{who['api_key'].pk}" if "api_key" in who else f"user:{who['user'].pk}"
