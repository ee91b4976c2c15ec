"""Evolution pages of targets and releases: register a target and edit its config (every bad field named; the
commands, sandbox levels, hot_swap and scripted_fixtures are the operator's; a worker reads the repository, the pages
poll the target's state while it is cloning), the hot-swap release history and its rollback (the project owners';
run by a worker, the page polls the rollback's status JSON).

Reads go through `evolution.selectors`, writes through `evolution.services` (a ClearError's message is shown as it
is).
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from clear.errors import ClearError
from clear.projects.models import Project
from clear.projects.selectors import membership_is_owner
from evolution.selectors import (
    evolution_job_list,
    evolution_rollback_get,
    evolution_target_by_id,
    evolution_target_list,
    evolution_target_releases,
    rollback_status_data,
)
from evolution.services import evolution_target_update
from evolution.services.api_actions import evolution_target_register
from evolution.services.rollbacks import release_rollback_request
from frontend.views import project_for
from frontend.views_evolution import or_404, owner_check


def _config_from(text: str, errors: dict) -> dict | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        errors["config"] = f"not valid JSON: {exc}"
        return None
    if not isinstance(value, dict):
        errors["config"] = "must be a JSON object"
    return value


def _target_save(request: HttpRequest, project: Project, target=None) -> tuple[object | None, dict]:
    """Register (target None) or edit a target from the POSTed form; the errors by field when it is refused."""
    post, errors = request.POST, {}
    config = _config_from(post.get("config", ""), errors)
    # Blank is the repository's evolution.json, as on registration, until a worker has read it.
    if target is not None and target.config and config is None and "config" not in errors:
        errors["config"] = "give the config as a JSON object"
    if errors:
        return None, errors
    try:
        if target is None:
            saved = evolution_target_register(
                project=project, name=post.get("name", ""), source=post.get("source", ""), config=config,
                default_branch=post.get("default_branch", ""), push_url=post.get("push_url", ""),
                created_by=request.user)
        else:
            saved = evolution_target_update(target=target, config=config, source=post.get("source", target.source),
                                            push_url=post.get("push_url", ""),
                                            default_branch=post.get("default_branch", ""))
    except ClearError as exc:
        fields = dict(exc.extra.get("fields") or {}) or {"": exc.message}
        return None, {"message": exc.message, **{k: str(v) for k, v in fields.items()}}
    return saved, {}


def _target_errors(errors: dict) -> dict:
    """Bad config fields (e.g. `diff_budget.max_files`) listed under the config; the others under their input."""
    form_fields = {"name", "source", "default_branch", "push_url"}
    return {"message": errors.get("message", ""),
            "fields": {k: v for k, v in errors.items() if k in form_fields},
            "config": [(k, v) for k, v in errors.items() if k not in form_fields and k != "message"]}


@login_required
def targets(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    errors, status = {}, 200
    if request.method == "POST":
        saved, errors = _target_save(request, project)
        if saved is not None:
            messages.success(request, f"Target {saved.name} registered: a worker is reading its repository; its "
                                      "state shows here.")
            return redirect("frontend:evolution-targets", slug=project.slug)
        status = 400
    context = {"project": project, "nav": "evolution", "targets": list(evolution_target_list(project=project)),
               "errors": _target_errors(errors), "values": request.POST if errors else {}}
    return render(request, "frontend/evolution_targets.html", context, status=status)


@login_required
def target_edit(request: HttpRequest, slug: str, target_id: int) -> HttpResponse:
    project = project_for(request, slug)
    target = or_404(evolution_target_by_id, project=project, target_id=target_id)
    errors, status = {}, 200
    if request.method == "POST":
        saved, errors = _target_save(request, project, target)
        if saved is not None:
            messages.success(request, f"Target {saved.name} saved.")
            return redirect("frontend:evolution-target", slug=project.slug, target_id=target.pk)
        status = 400
        target.refresh_from_db()
    config_text = request.POST.get("config") if errors else _config_text(target)
    context = {"project": project, "nav": "evolution", "target": target, "config_text": config_text,
               "git_timeout": f"{settings.CLEAR_GIT_TIMEOUT_SECONDS:g}",
               "errors": _target_errors(errors), "values": request.POST if errors else {},
               "jobs": list(evolution_job_list(project=project, target=target)[:10])}
    return render(request, "frontend/evolution_target.html", context, status=status)


def _config_text(target) -> str:
    if target.config:
        return json.dumps(target.config, indent=2)
    # Its evolution.json not read yet: what was asked for at registration (blank: that file alone).
    return json.dumps(target.config_requested, indent=2) if target.config_requested is not None else ""


@login_required
def target_status(request: HttpRequest, slug: str, target_id: int) -> JsonResponse:
    """What the target pages poll while a worker reads the repository; a new state_version reloads them."""
    project = project_for(request, slug)
    target = or_404(evolution_target_by_id, project=project, target_id=target_id)
    return JsonResponse({"state": target.state, "state_reason": target.state_reason,
                         "state_version": f"{target.state}:{target.state_version}"})


@login_required
def releases(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    rows = []
    for target in evolution_target_list(project=project):
        record = evolution_target_releases(project=project, target=target)
        releases_kept = record.state.releases.items() if record.state else []
        rows.append({"target": target, "releases": record,
                     "entries": [(release_id, info, record.rows.get(release_id)) for release_id, info in releases_kept],
                     "rollback_running": record.rollback is not None and not record.rollback.is_done})
    context = {"project": project, "nav": "evolution", "rows": rows,
               "owner": membership_is_owner(project=project, user=request.user)}  # a member sees no rollback buttons
    return render(request, "frontend/evolution_releases.html", context)


@login_required
@require_POST
def release_rollback(request: HttpRequest, slug: str, target_id: int) -> HttpResponse:
    """Queue the rollback and come back at once: a worker swaps, reloads and re-probes; the page follows it."""
    project = project_for(request, slug)
    owner_check(request, project, "Only the project's owners roll a target back")
    target = or_404(evolution_target_by_id, project=project, target_id=target_id)
    try:
        rollback = release_rollback_request(target=target, user=request.user,
                                            to_release=request.POST.get("to_release", "").strip())
    except ClearError as exc:
        messages.error(request, exc.message)
    else:
        messages.info(request, f"{target.name}: rolling back to {rollback.to_release or 'the last good release'}; "
                               "the agent is reloaded and health-checked, this page follows it.")
    return redirect(f"{reverse('frontend:evolution-releases', kwargs={'slug': project.slug})}#releases-{target.pk}")


@login_required
def release_rollback_status(request: HttpRequest, slug: str, target_id: int, rollback_id: int) -> JsonResponse:
    project = project_for(request, slug)
    target = or_404(evolution_target_by_id, project=project, target_id=target_id)
    rollback = or_404(evolution_rollback_get, project=project, target=target, rollback_id=rollback_id)
    return JsonResponse(rollback_status_data(rollback))
