"""Server-rendered pages. Views resolve the project through selectors, so an outsider gets 404, never a leak.

Pages by area: this module (overview, workflow graph, nodes, API keys), `views_traces` (search and viewer),
`views_runs` (diagnosis runs), `views_settings` (rubrics, judge model, audit log), `views_login`.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from clear.errors import NotFoundError
from clear.projects.client_address import client_address_get
from clear.projects.models import Project
from clear.projects.selectors import api_key_list, project_get_for_user, project_list_for_user
from clear.projects.services import api_key_create, api_key_revoke
from diagnosis.insights.headline import diagnosis_run_headline
from diagnosis.models import Insight
from diagnosis.selectors import (
    diagnosis_run_latest,
    diagnosis_run_failing_traces,
    diagnosis_run_list_with_insights,
    diagnosis_run_spend,
    insight_count_by_node,
    node_stats_list,
    node_workflow_get,
)
from frontend import charts
from frontend.dashboard_cache import dashboard_aggregate
from frontend.heatmap import heatmap_choice, heatmap_run_label, heatmap_shaded
from traces.selectors import (
    GRAPH_TRACE_SAMPLE,
    trace_list,
    trace_release_list,
    trace_sample_pks,
    trace_stats,
    trace_volume_series,
)


def project_for(request: HttpRequest, slug: str) -> Project:
    """The project named in the URL if the user is a member of it; 404 otherwise."""
    try:
        project = project_get_for_user(user=request.user, slug=slug)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
    if request.session.get("last_project") != project.slug:  # an unchanged session is not written back
        request.session["last_project"] = project.slug
    return project


_project_for = project_for  # the name older code used


def release_param(request: HttpRequest, releases: list[str]) -> str:
    release = request.GET.get("release", "").strip()
    if release and release not in releases:
        messages.warning(request, f"No traces with release {release!r}; showing every release.")
        return ""
    return release


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
    project = project_for(request, slug)
    base_url = request.build_absolute_uri("/").rstrip("/")

    def figures() -> dict:
        stats = trace_stats(project=project)
        if not stats.traces:
            return {"stats": stats}
        latest = diagnosis_run_latest(project=project)
        # The insights' figures come from this run, not from whichever run was started last (a gate's, say).
        headline = diagnosis_run_headline(project=project)
        shown = headline or latest
        return {"stats": stats, "series": trace_volume_series(project=project),
                "spend": diagnosis_run_spend(project=project), "latest_run": latest, "figures_run": headline,
                # the run's own figure beside the run (the judge spend card counts every run's latest verdicts)
                "run_failing": diagnosis_run_failing_traces(project=project, run=shown) if shown else 0}

    cached = dashboard_aggregate(project=project, name="overview", params=(), compute=figures)
    stats = cached.value["stats"]
    context = {
        "project": project,
        "nav": "overview",
        "otlp_endpoint": f"{base_url}/v1/traces",
        "base_url": base_url,
        "has_keys": api_key_list(project=project).exists(),
        "stats": stats,
        "recent_traces": trace_list(project=project)[:15],
    }
    if stats.traces:
        context.update({
            "chart": charts.volume_chart(cached.value["series"]),
            "spend": cached.value["spend"],
            "computed_at": cached.computed_at,
            # one snapshot: the runs and their figures are cached with the counts they sit beside
            "latest_run": cached.value["latest_run"],
            "figures_run": cached.value["figures_run"],
            "run_failing": cached.value["run_failing"],
            "top_insights": top_insights(project=project),
        })
    return render(request, "frontend/overview.html", context)


@login_required
def workflow(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    releases = trace_release_list(project=project)
    release = release_param(request, releases)
    sample = GRAPH_TRACE_SAMPLE
    cached = dashboard_aggregate(project=project, name="workflow", params=(release, sample), compute=lambda: (
        node_workflow_get(project=project, trace_pks=trace_sample_pks(
            project=project, release=release, sample=sample))))
    stats, edges = cached.value
    graph = charts.workflow_graph(stats, edges)
    if graph:
        counts = insight_count_by_node(project=project)
        for node in graph.nodes:
            node.insights = counts.get(node.name, 0)
    context = {
        "project": project, "nav": "workflow", "releases": releases, "release": release, "sample": sample,
        "graph": graph, "edges": edges, "computed_at": cached.computed_at,
    }
    return render(request, "frontend/workflow.html", context)


@login_required
def nodes(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    releases = trace_release_list(project=project)
    release = release_param(request, releases)
    sample = GRAPH_TRACE_SAMPLE
    cached = dashboard_aggregate(project=project, name="nodes", params=(release, sample), compute=lambda: (
        node_stats_list(project=project, trace_pks=trace_sample_pks(
            project=project, release=release, sample=sample))))
    rows = list(cached.value)
    sort = request.GET.get("sort", "pass")
    if sort == "spans":
        rows.sort(key=lambda r: (-r.spans, r.node))
    elif sort == "node":
        rows.sort(key=lambda r: r.node)
    else:
        sort = "pass"
        rows.sort(key=lambda r: (r.pass_rate if r.pass_rate is not None else 2, r.node))
    context = {"project": project, "nav": "nodes", "releases": releases, "release": release, "rows": rows,
               "sort": sort, "has_feedback": diagnosis_run_latest(project=project) is not None, "sample": sample,
               "computed_at": cached.computed_at}
    context.update(_heatmap_context(request, project))
    return render(request, "frontend/nodes.html", context)


def _heatmap_context(request: HttpRequest, project: Project) -> dict:
    """The heat map of the run named by `?run=` at `?level=` (defaults: `heatmap_choice`), each run labelled."""
    runs = diagnosis_run_list_with_insights(project=project)
    for run in runs:
        run.label = heatmap_run_label(run)
    wanted, level = request.GET.get("run", "").strip(), request.GET.get("level", "").strip()
    run, level = heatmap_choice(project=project, runs=runs, run_id=wanted, level=level)
    if wanted and run is None:
        run, level = heatmap_choice(project=project, runs=runs, level=level)
        which = "newest one" if run is None or run is runs[0] else "newest one with node-level insights"
        messages.warning(request, f"That run has no insights (or is not in this project); showing the {which}.")
    levels = [(value, f"{label}-level") for value, label in Insight.Level.choices]
    return {"heatmap_runs": runs, "heatmap_level": level, "levels": levels,
            "heatmap": heatmap_shaded(project=project, run=run, level=level) if run else None}


@login_required
def api_keys(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    context = {
        "project": project,
        "nav": "settings",
        "settings_tab": "api-keys",
        "api_keys": api_key_list(project=project),
        "issued": request.session.pop("issued_api_key", None),
        "base_url": request.build_absolute_uri("/").rstrip("/"),
    }
    return render(request, "frontend/api_keys.html", context)


@login_required
@require_POST
def api_key_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    issued = api_key_create(project=project, name=request.POST.get("name", "").strip()[:200], created_by=request.user,
                            address=client_address_get(meta=request.META))
    # The secret exists only in this session until the next page view: it is never stored.
    request.session["issued_api_key"] = {"public_key": issued.api_key.public_key, "secret": issued.secret}
    return redirect("frontend:api-keys", slug=project.slug)


@login_required
@require_POST
def api_key_revoke_view(request: HttpRequest, slug: str, key_id: int) -> HttpResponse:
    project = project_for(request, slug)
    api_key = api_key_list(project=project).filter(pk=key_id).first()
    if api_key is None:
        raise Http404("No such API key in this project")
    api_key_revoke(api_key=api_key, revoked_by=request.user, address=client_address_get(meta=request.META))
    messages.success(request, f"Key {api_key.public_key} revoked; clients using it now get 401.")
    return redirect("frontend:api-keys", slug=project.slug)


def top_insights(*, project: Project) -> list:
    from frontend.views_insights import top_insights as top  # views_insights imports this module

    return top(project=project)


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")
