"""What the evolution API modules share: id bounds, the 409 and 403 responses, body validation, the acting user or
key, and the refusal of a key where a person must decide."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework.request import Request

from clear.api.fields import POSTGRES_BIGINT_MAX
from clear.projects.authentication import ProjectKeyUser
from evolution.errors import PersonRequired

ID = {"min_value": 1, "max_value": POSTGRES_BIGINT_MAX}
CONFLICT = OpenApiResponse(description="the job is not in a state that allows this")
PERSON_REQUIRED = OpenApiResponse(description="person_required: always, for every project key, whatever the id; a "
                                              "project owner does this in the web UI")


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


def person_required(*, action: str, page: str) -> PersonRequired:
    """The answer to every key on an endpoint that makes a release live or takes it down: raised before anything is
    looked up, so a key learns nothing of the id it sent either."""
    return PersonRequired(
        f"A project API key cannot {action}: a person must, logged in to the web UI as an owner of the project, on "
        f"{page}. Keys may start jobs and read them.", extra={"action": action, "page": page})
