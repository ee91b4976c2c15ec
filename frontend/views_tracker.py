"""Settings → Issue tracker (connect, edit, disconnect a GitHub-compatible tracker) and the tickets page's push
button. Writes go through `diagnosis.tickets.services` and `push.tickets_push_request`, whose ClearError messages
are shown as they are. The token is write-only: no page ever renders it, or any part of it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from clear.errors import ClearError
from clear.projects.models import Project
from diagnosis.tickets.models import IssueTrackerConnection
from diagnosis.tickets.push import tickets_push_request
from diagnosis.tickets.selectors import STATUS_FILTERS
from diagnosis.tickets.services import issue_tracker_connect, issue_tracker_disconnect
from frontend.forms import IssueTrackerForm
from frontend.views import project_for


def tracker_connection(*, project: Project) -> IssueTrackerConnection | None:
    return IssueTrackerConnection.objects.filter(project=project).first()


def _page(request: HttpRequest, project: Project, form: IssueTrackerForm, connection, status: int = 200):
    context = {"project": project, "nav": "settings", "settings_tab": "issue-tracker", "form": form,
               "connection": connection}
    return render(request, "frontend/issue_tracker.html", context, status=status)


@login_required
def issue_tracker(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    connection = tracker_connection(project=project)
    if request.method != "POST":
        initial = ({"base_url": connection.base_url, "repository": connection.repository,
                    "enabled": connection.enabled} if connection else None)
        return _page(request, project, IssueTrackerForm(initial=initial), connection)
    form = IssueTrackerForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            saved = issue_tracker_connect(project=project, repository=data["repository"],
                                          token=data["token"] or None, base_url=data["base_url"],
                                          enabled=data["enabled"])
        except ClearError as exc:
            form.add_error(None, exc.message)
        else:
            verb = "saved" if connection else "connected"
            messages.success(request, f"Issue tracker {verb}: {saved.repository} at {saved.base_url}"
                                      f"{'' if saved.enabled else ' (disabled: nothing is pushed)'}.")
            return redirect("frontend:issue-tracker", slug=project.slug)
    return _page(request, project, form, connection, status=400)


@login_required
@require_POST
def issue_tracker_remove(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    connection = tracker_connection(project=project)
    issue_tracker_disconnect(project=project)
    if connection:
        messages.success(request, f"Disconnected from {connection.repository}; its token is deleted. Issues already "
                                  "pushed stay on the tracker.")
    return redirect("frontend:issue-tracker", slug=project.slug)


@login_required
@require_POST
def tickets_push_view(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    try:
        connection = tickets_push_request(project=project)
    except ClearError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Push to {connection.repository} requested: each ticket gets its issue (created, "
                                  "updated or closed); the result shows above the list when it ends.")
    back = request.POST.get("back", "open")
    back = back if back in STATUS_FILTERS else "open"
    return redirect(reverse("frontend:tickets", kwargs={"slug": project.slug}) + f"?status={back}")
