"""Server-rendered pages. Views resolve the project through selectors, so an outsider gets 404, never a leak."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from clear.errors import NotFoundError
from clear.projects.models import Project
from clear.projects.selectors import api_key_list, project_get_for_user, project_list_for_user
from clear.projects.services import api_key_create, api_key_revoke
from traces.selectors import trace_list, trace_stats


def _project_for(request: HttpRequest, slug: str) -> Project:
    try:
        project = project_get_for_user(user=request.user, slug=slug)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
    request.session["last_project"] = project.slug
    return project


@login_required
def home(request: HttpRequest) -> HttpResponse:
    projects = project_list_for_user(user=request.user)
    last = request.session.get("last_project")
    project = projects.filter(slug=last).first() if last else None
    project = project or projects.first()
    if project is None:
        return render(request, "frontend/no_projects.html")
    return redirect("frontend:overview", slug=project.slug)


@login_required
def overview(request: HttpRequest, slug: str) -> HttpResponse:
    project = _project_for(request, slug)
    base_url = request.build_absolute_uri("/").rstrip("/")
    context = {
        "project": project,
        "nav": "overview",
        "otlp_endpoint": f"{base_url}/v1/traces",
        "base_url": base_url,
        "has_keys": api_key_list(project=project).exists(),
        "stats": trace_stats(project=project),
        "recent_traces": trace_list(project=project)[:15],
    }
    return render(request, "frontend/overview.html", context)


@login_required
def api_keys(request: HttpRequest, slug: str) -> HttpResponse:
    project = _project_for(request, slug)
    context = {
        "project": project,
        "nav": "settings",
        "api_keys": api_key_list(project=project),
        "issued": request.session.pop("issued_api_key", None),
        "base_url": request.build_absolute_uri("/").rstrip("/"),
    }
    return render(request, "frontend/api_keys.html", context)


@login_required
@require_POST
def api_key_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    project = _project_for(request, slug)
    issued = api_key_create(project=project, name=request.POST.get("name", "").strip()[:200], created_by=request.user)
    # The secret exists only in this session until the next page view: it is never stored.
    request.session["issued_api_key"] = {"public_key": issued.api_key.public_key, "secret": issued.secret}
    return redirect("frontend:api-keys", slug=project.slug)


@login_required
@require_POST
def api_key_revoke_view(request: HttpRequest, slug: str, key_id: int) -> HttpResponse:
    project = _project_for(request, slug)
    api_key = api_key_list(project=project).filter(pk=key_id).first()
    if api_key is None:
        raise Http404("No such API key in this project")
    api_key_revoke(api_key=api_key)
    messages.success(request, f"Key {api_key.public_key} revoked; clients using it now get 401.")
    return redirect("frontend:api-keys", slug=project.slug)


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")
