"""Insights (the recurring failure patterns a diagnosis run finds) and tickets (the bug list made from them).

Reads go through `diagnosis.selectors` and `diagnosis.tickets.selectors`; review decisions, status changes and
exports through their services. An outsider gets 404 for every page and every POST (`project_for`).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from clear.errors import ClearError, NotFoundError
from clear.projects.models import Project
from diagnosis.attribution.selectors import attribution_summary_for_insight, attribution_summary_map
from diagnosis.attribution.services import attribution_request_for_insight
from diagnosis.models import Insight
from diagnosis.selectors import (
    diagnosis_run_latest,
    insights_last_refreshed,
    insight_get,
    insight_count_by_node,
    insight_links,
    insight_list,
    insight_list_ranked,
    insight_list_top,
    insight_evidence_of_figures_run,
    insight_release_figures,
    insight_trend,
)
from diagnosis.selectors.association import insight_outcome_shares_map
from diagnosis.selectors.expired_evidence import insight_evidence_expired_list
from diagnosis.selectors.problems import insight_nodes_map
from diagnosis.services.insights_refresh import insights_refresh_now, refresh_seconds
from diagnosis.services.insights_review import insight_confirm, insight_reject, insight_status_set
from diagnosis.tickets.export import CONTENT_TYPES, OUTPUTS, tickets_export
from diagnosis.tickets.models import IssueTrackerConnection, Ticket
from diagnosis.tickets.selectors import STATUS_FILTERS, ticket_for_insight, ticket_get, ticket_list
from diagnosis.tickets.services import ticket_status_set
from evolution.selectors import evolution_insight_fix_note, evolution_insight_fix_rolled_back
from frontend.pagination import keyset_page
from frontend.views import project_for
from traces.selectors import trace_release_list

PAGE_SIZE = 50
EVIDENCE_LIMIT = 25
TOP_INSIGHTS = 8


def _choice(request: HttpRequest, name: str, allowed) -> str:
    value = request.GET.get(name, "").strip()
    return value if value in allowed else ""


def _insight_for(project: Project, insight_id) -> Insight:
    try:
        return insight_get(project=project, insight_id=insight_id)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc


def _nodes_by_statements(insight: Insight) -> list[str]:
    """The nodes a system insight spans, those with the most statements first (JSON keys keep no order)."""
    return [node for node, _ in sorted((insight.affected_nodes or {}).items(), key=lambda kv: (-kv[1], kv[0]))]


def top_insights(*, project: Project) -> list[Insight]:
    return insight_list_top(project=project, limit=TOP_INSIGHTS)


@login_required
def insight_list_view(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    every = insight_list(project=project, include_by_design=True)
    by_design = request.GET.get("by_design") == "1"  # what a step does on every call: hidden unless asked for
    nodes = sorted(insight_count_by_node(project=project))
    releases = trace_release_list(project=project)
    filters = {
        "level": _choice(request, "level", Insight.Level.values),
        "node": _choice(request, "node", nodes),
        "severity": _choice(request, "severity", Insight.Severity.values),
        "status": _choice(request, "status", Insight.Status.values),
        "release": _choice(request, "release", releases),
    }
    # One row per problem unless a level is chosen: a system insight's node insights are nested in its row.
    nested = not filters["level"]
    insights = insight_list_ranked(project=project, level=filters["level"] or None, node=filters["node"] or None,
                                   severity=filters["severity"] or None, status=filters["status"] or None,
                                   release=filters["release"] or None, include_by_design=by_design, nested=nested)
    page = keyset_page(insights, field="rank", cursor=request.GET.get("cursor"), limit=PAGE_SIZE)
    if filters["release"]:  # that release's figures (its latest judging run, as the trend), not all releases'
        for insight in page.items:
            row = insight_release_figures(insight=insight, release=filters["release"])
            insight.frequency, insight.trace_count = row["frequency"], row["count"]
            insight.judged_in_release = row["judged"]
    held = insight_nodes_map(project=project, system_pks=[i.pk for i in page.items
                                                          if i.level == Insight.Level.SYSTEM]) if nested else {}
    for insight in page.items:
        insight.bar = insight.frequency  # one absolute scale, 0–100% of judged traces, as on the overview
        insight.nodes_shown = _nodes_by_statements(insight)
        insight.nested_nodes = held.get(insight.pk, [])
    context = {
        "project": project, "nav": "insights", "insights": page.items, "page": page, "filters": filters,
        "filtered": any(filters.values()), "has_any": every.exists(), "nodes": nodes,
        "by_design": by_design, "by_design_count": every.filter(by_design=True).count(),
        "releases": releases, "levels": Insight.Level.choices, "severities": Insight.Severity.choices,
        "statuses": Insight.Status.choices, "has_run": diagnosis_run_latest(project=project) is not None,
        "last_refreshed": insights_last_refreshed(project=project), "refresh_seconds": round(refresh_seconds()),
    }
    return render(request, "frontend/insights.html", context)


@login_required
@require_POST
def insight_refresh(request: HttpRequest, slug: str) -> HttpResponse:
    """"Refresh now": the continuous run's refresh, queued after commit for a worker (not waited for here)."""
    project = project_for(request, slug)
    queued = insights_refresh_now(project=project)
    if queued is None:
        messages.info(request, "Nothing to refresh: no continuous run is open today. Traces are judged as they "
                               "complete once the worker's beat runs, or start a diagnosis run.")
    elif queued:
        messages.success(request, "Refresh queued: the list updates when a worker has done it (reload in a moment).")
    else:
        messages.info(request, "A refresh is already queued or running: the list updates when it is done.")
    return redirect("frontend:insights", slug=project.slug)


@login_required
def insight_detail(request: HttpRequest, slug: str, insight_id: int) -> HttpResponse:
    project = project_for(request, slug)
    insight = _insight_for(project, insight_id)
    trend = insight_trend(project=project, insight=insight)
    by_release = [{**r, "bar": r.get("frequency") or 0} for r in trend.by_release]  # absolute, 0–100%
    evidence = insight_evidence_of_figures_run(project=project, insight=insight)  # the ticket cites the same
    # ?node=: the citations of statements made at that node (a heat map cell links here).
    node = request.GET.get("node", "").strip()[:300]
    if node:
        evidence = evidence.filter(statement__node=node)
    # Citations of traces retention removed: frozen, they say the trace expired instead of linking to it.
    expired = insight_evidence_expired_list(project=project, insight=insight, node=node)
    shown = list(evidence[:EVIDENCE_LIMIT])
    expired_shown = expired[:EVIDENCE_LIMIT - len(shown)]  # after the live ones: their traces are the oldest
    shares = insight_outcome_shares_map(project=project, insights=[insight])[insight.pk] if insight.last_run_id \
        else None
    unknown = insight.trace_count - shares.failing_with_pattern - shares.succeeding_with_pattern if shares else 0
    context = {
        "project": project, "nav": "insights", "insight": insight, "trend": by_release,
        "shares": shares, "outcome_unknown": max(unknown, 0),
        "links": list(insight_links(project=project, insight=insight)),
        "is_system": insight.level == Insight.Level.SYSTEM,
        "evidence": shown, "evidence_total": evidence.count() + len(expired),
        "evidence_of_figures_run": insight.last_run_id is not None
        and not evidence.exclude(run_id=insight.last_run_id).exists(),
        "expired_evidence": expired_shown, "evidence_shown": len(shown) + len(expired_shown),
        "affected_nodes": sorted((insight.affected_nodes or {}).items(), key=lambda kv: (-kv[1], kv[0])),
        "ticket": ticket_for_insight(project=project, insight=insight),
        "statuses": Insight.Status.choices, "evidence_node": node,
        "evolution_fix": evolution_insight_fix_note(project=project, insight=insight)  # _insight_fix_note.html
        or evolution_insight_fix_rolled_back(project=project, insight=insight),
        "attribution": attribution_summary_for_insight(project=project, insight=insight),
    }
    return render(request, "frontend/insight.html", context)


@login_required
@require_POST
def insight_review(request: HttpRequest, slug: str, insight_id: int) -> HttpResponse:
    project = project_for(request, slug)
    insight = _insight_for(project, insight_id)
    action = request.POST.get("action", "")
    note = request.POST.get("note", "").strip()[:2000]
    try:
        if action == "confirm":
            insight_confirm(project=project, insight=insight, user=request.user, note=note)
            messages.success(request, "Insight confirmed.")
        elif action == "reject":
            insight_reject(project=project, insight=insight, user=request.user, note=note)
            messages.success(request, "Insight rejected: it is hidden from the lists, and later runs that find it "
                                      "again keep it hidden.")
        else:
            messages.error(request, "Choose confirm or reject.")
    except ClearError as exc:
        messages.error(request, exc.message)
    return redirect("frontend:insight", slug=project.slug, insight_id=insight.pk)


@login_required
@require_POST
def insight_attribute(request: HttpRequest, slug: str, insight_id: int) -> HttpResponse:
    """"Attribute them": the insight's failing traces without an attribution, attributed by a worker (offline)."""
    project = project_for(request, slug)
    insight = _insight_for(project, insight_id)
    attribution_request_for_insight(project=project, insight_id=insight.pk)
    messages.success(request, "Attribution queued: a worker attributes its failing traces (reload in a moment).")
    return redirect("frontend:insight", slug=project.slug, insight_id=insight.pk)


@login_required
@require_POST
def insight_status(request: HttpRequest, slug: str, insight_id: int) -> HttpResponse:
    project = project_for(request, slug)
    insight = _insight_for(project, insight_id)
    status = request.POST.get("status", "")
    try:
        insight = insight_status_set(project=project, insight=insight, status=status, user=request.user)
        messages.success(request, f"Status set to {insight.get_status_display().lower()}.")
    except ClearError as exc:
        messages.error(request, exc.message)
    return redirect("frontend:insight", slug=project.slug, insight_id=insight.pk)


# --- tickets -------------------------------------------------------------------------------------------------------


@login_required
def ticket_list_view(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    status = request.GET.get("status", "open")
    if status not in STATUS_FILTERS:
        status = "open"
    # One row per problem: a ticket tracked by another (a node ticket under its system ticket) only when asked for
    # the won't-fix list, where it is.
    tickets = ticket_list(project=project, status=status, include_merged=status == Ticket.Status.WONT_FIX)
    page = keyset_page(tickets, field="frequency",
                       cursor=request.GET.get("cursor"), limit=PAGE_SIZE)
    # The node most blamed in each ticket's failing traces: the whole page's in two queries.
    summaries = attribution_summary_map(project=project, insight_ids={t.insight_id for t in page.items if t.insight_id},
                                        top=0)
    for ticket in page.items:
        summary = summaries.get(ticket.insight_id)
        ticket.attribution = summary if summary and summary["attributed"] else None
    context = {
        "project": project, "nav": "tickets", "tickets": page.items, "page": page, "status": status,
        "status_filters": [(s, s.replace("_", " ")) for s in STATUS_FILTERS],
        "statuses": Ticket.Status.choices, "outputs": OUTPUTS,
        "has_any": bool(page.items) or ticket_list(project=project).exists(),
        "tracker": IssueTrackerConnection.objects.filter(project=project).first(),
    }
    return render(request, "frontend/tickets.html", context)


@login_required
@require_POST
def ticket_status(request: HttpRequest, slug: str, ticket_id: int) -> HttpResponse:
    project = project_for(request, slug)
    try:
        ticket = ticket_get(project=project, ticket_id=ticket_id)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
    try:
        ticket = ticket_status_set(project=project, ticket=ticket, status=request.POST.get("status", ""),
                                   user=request.user)
        messages.success(request, f"Ticket {ticket.pk} is now {ticket.get_status_display().lower()}.")
    except ClearError as exc:
        messages.error(request, exc.message)
    back = request.POST.get("back", "open")
    back = back if back in STATUS_FILTERS else "open"
    return redirect(reverse("frontend:tickets", kwargs={"slug": project.slug}) + f"?status={back}")


@login_required
def ticket_export(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    output = request.GET.get("output", "md")
    status = request.GET.get("status", "open")
    if output not in OUTPUTS or status not in STATUS_FILTERS:
        raise Http404("Unknown export")
    text = tickets_export(project=project, output=output, status=status)
    response = HttpResponse(text, content_type=CONTENT_TYPES[output])
    response["Content-Disposition"] = f'attachment; filename="tickets-{project.slug}-{status}.{output}"'
    return response
