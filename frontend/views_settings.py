"""Settings: rubrics (written through the rubric services, whose errors are shown as they are), the judge
model configuration (read-only: it comes from the server's environment), the ingestion health (spans repaired or
rejected per reason), data retention (owners change it) and the audit log (owners only)."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from clear.errors import ClearError, NotFoundError
from clear.projects.models import Project
from clear.projects.selectors import audit_event_list, membership_is_owner
from clear.projects.services import project_retention_set
from diagnosis import conf as diagnosis_conf
from diagnosis.models import Rubric
from diagnosis.selectors import rubric_get, rubric_list
from diagnosis.services.evidence_expiry import retention_keeps_quotes
from diagnosis.services import rubric_create, rubric_delete, rubric_update
from frontend.forms import RetentionForm, RubricForm
from frontend.pagination import keyset_page
from frontend.views import project_for
from traces.selectors import span_node_list
from traces.selectors.ingest_issues import ingest_issue_summary
from traces.selectors.retention import project_disk_use, retention_days_effective, traces_expired

RUBRIC_EXAMPLES = {
    "regex": {"pattern": "sorry, I can't", "ignore_case": True, "expect": "absent", "field": "output",
              "spans": {"kind": "LLM"}},
    "jsonpath": {"path": "$.status", "assert": "equals", "value": "ok", "field": "output", "spans": {"kind": "TOOL"}},
    "tool_order": {"first": "refund_lookup", "then": "create_refund", "when": {"goal_regex": "refund"}},
    "tool_never": {"tool": "order_lookup", "when": {"goal_regex": "\\brefund"}},
    "coverage": {"path": ["$.order_id"], "sources": {"kind": "TOOL"}, "target": {"node": "writer", "kind": "LLM"}},
    "llm": {"criterion": "The final answer mentions every order number the customer asked about."},
}


def _rubric_for(project: Project, rubric_id: int) -> Rubric:
    try:
        return rubric_get(project=project, rubric_id=rubric_id)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc


def _rubrics_page(request: HttpRequest, project: Project, form: RubricForm, *, editing: Rubric | None = None,
                  status: int = 200) -> HttpResponse:
    context = {
        "project": project, "nav": "settings", "settings_tab": "rubrics", "form": form, "editing": editing,
        "rubrics": rubric_list(project=project), "nodes": span_node_list(project=project),
        "examples": {kind: json.dumps(config, indent=2) for kind, config in RUBRIC_EXAMPLES.items()},
        "kinds": Rubric.Kind.choices,
    }
    return render(request, "frontend/rubrics.html", context, status=status)


def _save(request: HttpRequest, project: Project, form: RubricForm, rubric: Rubric | None) -> Rubric | None:
    """Write through the service; its ClearError becomes a message on the form. None when nothing was saved."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    try:
        if rubric is None:
            return rubric_create(project=project, name=data["name"], kind=data["kind"], config=data["config"],
                                 node=data["node"].strip(), description=data["description"],
                                 enabled=data["enabled"])
        return rubric_update(rubric=rubric, name=data["name"], kind=data["kind"], config=data["config"],
                             node=data["node"].strip(), description=data["description"], enabled=data["enabled"])
    except ClearError as exc:
        form.add_error(None, exc.message)
        return None


@login_required
def rubrics(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    if request.method == "POST":
        form = RubricForm(request.POST)
        rubric = _save(request, project, form, None)
        if rubric is None:
            return _rubrics_page(request, project, form, status=400)
        messages.success(request, f"Rubric {rubric.name!r} created; diagnosis runs judge with it from now on.")
        return redirect("frontend:rubrics", slug=project.slug)
    kind = request.GET.get("kind", "regex")
    kind = kind if kind in RUBRIC_EXAMPLES else "regex"
    form = RubricForm(initial={"kind": kind, "enabled": True, "config": json.dumps(RUBRIC_EXAMPLES[kind], indent=2)})
    return _rubrics_page(request, project, form)


@login_required
def rubric_edit(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    project = project_for(request, slug)
    rubric = _rubric_for(project, rubric_id)
    if request.method == "POST":
        form = RubricForm(request.POST)
        saved = _save(request, project, form, rubric)
        if saved is None:
            rubric.refresh_from_db()
            return _rubrics_page(request, project, form, editing=rubric, status=400)
        messages.success(request, f"Rubric {saved.name!r} saved.")
        return redirect("frontend:rubrics", slug=project.slug)
    form = RubricForm(initial={"name": rubric.name, "kind": rubric.kind, "node": rubric.node,
                               "description": rubric.description, "enabled": rubric.enabled,
                               "config": json.dumps(rubric.config, indent=2)})
    return _rubrics_page(request, project, form, editing=rubric)


@login_required
@require_POST
def rubric_toggle(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    project = project_for(request, slug)
    rubric = _rubric_for(project, rubric_id)
    try:
        rubric = rubric_update(rubric=rubric, enabled=not rubric.enabled)
    except ClearError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Rubric {rubric.name!r} {'enabled' if rubric.enabled else 'disabled'}.")
    return redirect("frontend:rubrics", slug=project.slug)


@login_required
@require_POST
def rubric_remove(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    project = project_for(request, slug)
    rubric = _rubric_for(project, rubric_id)
    name = rubric.name
    rubric_delete(rubric=rubric)
    messages.success(request, f"Rubric {name!r} deleted. Feedback it left earlier stays with its runs.")
    return redirect("frontend:rubrics", slug=project.slug)


@login_required
def judge_model(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    context = {
        "project": project, "nav": "settings", "settings_tab": "judge",
        "model": diagnosis_conf.judge_model(),
        "api_base": getattr(settings, "CLEAR_JUDGE_API_BASE", "") or "",
        "api_key_set": bool(getattr(settings, "CLEAR_JUDGE_API_KEY", "")),
        "embedding_model": getattr(settings, "CLEAR_EMBEDDING_MODEL", "") or "",
        "concurrency": diagnosis_conf.judge_concurrency(),
        "continuous": diagnosis_conf.continuous_enabled(),
        "continuous_judges": diagnosis_conf.continuous_judges(),
        "quiet_seconds": diagnosis_conf.trace_quiet_seconds(),
    }
    return render(request, "frontend/judge_model.html", context)


AUDIT_PAGE_SIZE = 50


@login_required
def audit_log(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)  # outsiders: 404
    if not membership_is_owner(project=project, user=request.user):
        raise PermissionDenied("Only the project's owners see its audit log")  # members: 403
    page = keyset_page(audit_event_list(project=project), field="created_at", cursor=request.GET.get("cursor"),
                       limit=AUDIT_PAGE_SIZE)
    context = {"project": project, "nav": "settings", "settings_tab": "audit-log", "page": page}
    return render(request, "frontend/audit_log.html", context)


INGEST_HEALTH_DAYS = 14


@login_required
def ingestion_health(request: HttpRequest, slug: str) -> HttpResponse:
    """Any member sees it: broken instrumentation is the team's problem, not only the owners'."""
    project = project_for(request, slug)  # outsiders: 404
    rows = ingest_issue_summary(project=project, days=INGEST_HEALTH_DAYS)
    context = {"project": project, "nav": "settings", "settings_tab": "ingestion-health", "days": INGEST_HEALTH_DAYS,
               "repaired": [r for r in rows if r.kind == "repaired"],
               "rejected": [r for r in rows if r.kind == "rejected"]}
    return render(request, "frontend/ingestion_health.html", context)


@login_required
def data_retention(request: HttpRequest, slug: str) -> HttpResponse:
    """How long the project keeps traces (its own days, else CLEAR_RETENTION_DAYS), how many traces the next daily
    run would remove, whether evidence quotes outlive them (CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES, read-only), and
    the form owners change it with."""
    project = project_for(request, slug)
    owner = membership_is_owner(project=project, user=request.user)
    form = RetentionForm(request.POST or None, initial={"days": project.retention_days})
    if request.method == "POST":
        if not owner:
            raise PermissionDenied("Only the project's owners change its data retention")
        if form.is_valid():
            try:
                project_retention_set(project=project, days=form.cleaned_data["days"], user=request.user,
                                      address=request.META.get("REMOTE_ADDR"))
            except ClearError as exc:
                form.add_error("days", exc.message)
            else:
                messages.success(request, "Data retention saved. The daily run applies it; nothing is deleted now.")
                return redirect("frontend:data-retention", slug=project.slug)
    expired = traces_expired(project=project)
    context = {
        "project": project, "nav": "settings", "settings_tab": "retention", "form": form, "owner": owner,
        "server_days": settings.CLEAR_RETENTION_DAYS, "days": retention_days_effective(project=project),
        "would_expire": expired.count() if expired is not None else None,
        "disk": project_disk_use(project=project),
        "keep_quotes": retention_keeps_quotes(),  # server-wide, read-only here
    }
    return render(request, "frontend/data_retention.html", context)
