"""Error pages (404, 403, 500) with the navigation, a short explanation and where to go next.

Under /api/, /v1/ and /api/public/ an error keeps the API's body ({"message", "code", "extra"}), never HTML. The
500 page is rendered from as little as possible: if the error came from the database, the navigation (which reads
the user's projects) is left out rather than failing again. Django logs the traceback before these run.
"""

from __future__ import annotations

import logging
import re

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

from clear.errors import NotFoundError
from clear.projects.selectors import project_get_for_user

logger = logging.getLogger(__name__)

_API_PREFIXES = ("/api/", "/v1/")
_PROJECT_PATH = re.compile(r"^/p/(?P<slug>[-\w]+)/")

_PAGES = {
    403: ("Not allowed", "You are signed in, but this action is not open to your account or the form expired. "
          "Go back, reload the page and try again."),
    404: ("Page not found", "Nothing lives at this address, or it belongs to a project you are not a member of. "
          "Check the link, or pick a page from the navigation."),
    500: ("Something went wrong", "The server failed while building this page. The error is in the server log "
          "with its traceback; reload in a moment, or go back to the overview."),
}


def _project(request: HttpRequest):
    """The project of a /p/<slug>/ address, if the user is a member (so the navigation can show it)."""
    match = _PROJECT_PATH.match(request.path)
    user = getattr(request, "user", None)
    if not match or user is None or not user.is_authenticated:
        return None
    try:
        return project_get_for_user(user=user, slug=match["slug"])
    except NotFoundError:
        return None


def _api_error(status: int) -> JsonResponse:
    title, _ = _PAGES[status]
    codes = {403: "permission_denied", 404: "not_found", 500: "server_error"}
    message = title + (": see the server log" if status == 500 else "")
    return JsonResponse({"message": message, "code": codes[status], "extra": {}}, status=status)


def _render(request: HttpRequest, status: int, detail: str = "") -> HttpResponse:
    if request.path.startswith(_API_PREFIXES):
        return _api_error(status)
    title, explanation = _PAGES[status]
    context = {"status": status, "title": title, "explanation": explanation, "detail": detail,
               "path": request.path}
    try:
        context["project"] = _project(request)
        return HttpResponse(loader.render_to_string("frontend/error.html", context, request=request), status=status)
    except Exception:  # the page must answer even when what broke was the database or a context processor
        logger.exception("the %s page could not be rendered with the navigation", status)
        context.pop("project", None)
        return HttpResponse(loader.render_to_string("frontend/error.html", context | {"bare": True}), status=status)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # A message from our own code (project_for, selectors) says what was missing; Django's resolver's does not.
    detail = str(exception.args[0]) if exception is not None and exception.args and isinstance(
        exception.args[0], str) else ""
    return _render(request, 404, detail)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _render(request, 403)


def server_error(request: HttpRequest) -> HttpResponse:
    return _render(request, 500)
