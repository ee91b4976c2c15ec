"""Pushing tickets to a GitHub-compatible issues API (a fake one on 127.0.0.1): one issue per ticket across
repeated pushes, updated on change, closed when fixed, found again by fingerprint when the local record is lost,
and errors a person can act on."""

import io
import json

import pytest
from django.core.management import call_command

from diagnosis.models import Insight
from diagnosis.tickets.errors import IssueTrackerError, IssueTrackerNotConfiguredError
from diagnosis.tickets.models import IssueTrackerConnection, Ticket
from diagnosis.tickets.push import tickets_push
from diagnosis.tickets.services import issue_tracker_connect, ticket_status_set, ticket_sync_for_insights
from tests.diagnosis.insights.conftest import TOUCHED_BY, diagnose, insight_for_tasks
from tests.tickets.conftest import ticket_of, tracked

pytestmark = pytest.mark.django_db


def connect(project, github, **options):
    return issue_tracker_connect(project=project, repository=options.pop("repository", github.repository),
                                 token=options.pop("token", github.token), base_url=github.url, **options)


def seed_unrelated(github):
    """Issues people filed by hand, and a pull request: never touched, and they make the list span pages."""
    for n in range(5):
        github.add(title=f"Hand-written issue {n}", body="Steps to reproduce: …")
    github.add(title="A pull request", body="<!-- clear-fingerprint: 0123456789abcdef -->", pull_request=True)


def test_one_issue_per_ticket_across_pushes_updated_on_change_closed_when_fixed(project, desk_run, github):
    seed_unrelated(github)
    connect(project, github)
    tickets = list(Ticket.objects.filter(project=project).order_by("pk"))

    summary = tickets_push(project=project)
    assert summary.created == len(tickets) and summary.failed == 0 and summary.recovered == 0
    issues = github.clear_issues()
    assert len(issues) == len(tickets) and len(github.issues) == len(tickets) + 6
    for ticket in Ticket.objects.filter(project=project):
        issue = github.issues[ticket.external_number]
        assert issue["title"] == ticket.title and issue["body"] == ticket.body and issue["state"] == "open"
        assert f"<!-- clear-fingerprint: {ticket.fingerprint} -->" in issue["body"]
        assert ticket.external_url.endswith(f"/issues/{ticket.external_number}") and ticket.pushed_at
    # The search went through every page of the list (Link rel="next"), the pull request was skipped.
    assert sum(1 for method, _ in github.requests if method == "GET") == 2  # 6 issues, 4 a page

    github.requests.clear()
    for _ in range(2):  # pushing again changes nothing and creates nothing
        summary = tickets_push(project=project)
        assert summary.unchanged == len(tickets) and summary.created == summary.updated == 0
    assert github.requests == [] and len(github.clear_issues()) == len(tickets)

    # Fixed: the insight follows and the issue closes as completed; won't fix closes as not planned.
    fixed = ticket_of(tracked(insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], desk_run)))
    ticket_status_set(project=project, ticket=fixed, status="fixed")
    dropped = Ticket.objects.filter(project=project).exclude(pk=fixed.pk).order_by("pk").first()
    ticket_status_set(project=project, ticket=dropped, status="wont_fix")
    summary = tickets_push(project=project)
    assert summary.updated == 2 and summary.unchanged == len(tickets) - 2 and summary.created == 0
    fixed.refresh_from_db()
    assert github.issues[fixed.external_number]["state"] == "closed"
    assert github.issues[fixed.external_number]["state_reason"] == "completed"
    assert github.issues[fixed.external_number]["body"] == fixed.body and "status: fixed" in fixed.body
    assert github.issues[dropped.external_number]["state_reason"] == "not_planned"
    assert [m for m, _ in github.writes()] == ["PATCH", "PATCH"]

    # The fault is still there: the next diagnosis reopens the insight, the ticket, then the issue.
    diagnose(project, "r1")
    fixed.refresh_from_db()
    assert fixed.status == "open" and Insight.objects.get(pk=fixed.insight_id).status == "open"
    summary = tickets_push(project=project)
    assert summary.created == 0 and github.issues[fixed.external_number]["state"] == "open"
    assert len(github.clear_issues()) == Ticket.objects.filter(project=project).count() == len(tickets)


def test_a_lost_local_record_is_found_by_fingerprint_not_created_again(project, desk_run, github):
    seed_unrelated(github)
    connect(project, github)
    tickets_push(project=project)
    numbers = dict(Ticket.objects.filter(project=project).values_list("pk", "external_number"))

    # The local records are lost (a restored backup, a push that died before saving); one ticket changed meanwhile.
    changed = Ticket.objects.filter(project=project).order_by("pk").first()
    ticket_status_set(project=project, ticket=changed, status="fixed")
    Ticket.objects.filter(project=project).update(external_number=None, external_url="", pushed_hash="")
    github.requests.clear()

    summary = tickets_push(project=project)
    assert summary.created == 0 and summary.recovered == len(numbers) and summary.failed == 0
    assert dict(Ticket.objects.filter(project=project).values_list("pk", "external_number")) == numbers
    assert [m for m, _ in github.writes()] == ["PATCH"]  # only the changed ticket, closed
    assert github.issues[numbers[changed.pk]]["state"] == "closed"
    assert len(github.clear_issues()) == len(numbers)
    assert tickets_push(project=project).unchanged == len(numbers)


def test_a_ticket_closed_before_its_first_push_opens_no_issue(project, desk_run, github):
    connect(project, github)
    first = Ticket.objects.filter(project=project).order_by("pk").first()
    ticket_status_set(project=project, ticket=first, status="wont_fix")
    summary = tickets_push(project=project)
    assert summary.skipped == 1 and summary.created == Ticket.objects.filter(project=project).count() - 1
    first.refresh_from_db()
    assert first.external_number is None


def _synthetic(project, n=3):
    """Insights without a diagnosis, for the error paths."""
    insights = [Insight.objects.create(project=project, level="node", node="planner", title=f"Problem {i}",
                                       fingerprint=f"{i:040x}", frequency=0.1 * (i + 1)) for i in range(n)]
    ticket_sync_for_insights(project=project, insights=insights)
    return list(Ticket.objects.filter(project=project).order_by("pk"))


def test_tracker_errors_are_clear_and_kept(project, github):
    _synthetic(project)
    with pytest.raises(IssueTrackerNotConfiguredError):
        tickets_push(project=project)

    connect(project, github, token="ghp_wrong_token_abcdefgh")
    with pytest.raises(IssueTrackerError) as error:
        tickets_push(project=project)
    connection = IssueTrackerConnection.objects.get(project=project)
    assert "401" in error.value.message and "token" in error.value.message
    assert connection.last_error == error.value.message and "ghp_wrong" not in connection.last_error
    assert connection.push_started_at is None and github.clear_issues() == []

    connect(project, github, repository="acme/no-such-repo")
    with pytest.raises(IssueTrackerError) as error:
        tickets_push(project=project)
    assert "acme/no-such-repo was not found" in error.value.message and "404" in error.value.message

    # A refused issue (422) is kept on its ticket; the others are pushed.
    connect(project, github)
    github.refused_titles.add("Problem 1")
    summary = tickets_push(project=project)
    assert summary.created == 2 and summary.failed == 1
    refused = Ticket.objects.get(project=project, title__contains="Problem 1")
    assert "422" in refused.push_error and refused.external_number is None
    connection.refresh_from_db()
    assert "422" in connection.last_error and connection.last_push_summary["failed"] == 1
    github.refused_titles.clear()
    summary = tickets_push(project=project)
    assert summary.created == 1 and summary.unchanged == 2 and len(github.clear_issues()) == 3

    unreachable = issue_tracker_connect(project=project, repository=github.repository, base_url="http://127.0.0.1:9")
    Ticket.objects.filter(project=project).update(external_number=None)
    with pytest.raises(IssueTrackerError) as error:
        tickets_push(project=project)
    assert error.value.transient and "Could not reach" in error.value.message
    assert unreachable.token == github.token  # a connection changed without a token keeps it


def test_push_api_and_command_go_through_the_task(project, api, github):
    _synthetic(project)
    response = api.post("/api/v1/tickets/push/")
    assert response.status_code == 400 and response.json()["code"] == "issue_tracker_not_configured"

    response = api.put("/api/v1/tickets/tracker/", {"base_url": github.url, "repository": github.repository,
                                                    "token": github.token}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["token_hint"] == "…" + github.token[-4:] and github.token not in response.content.decode()

    response = api.post("/api/v1/tickets/push/")
    assert response.status_code == 202 and response.json() == {"queued": True, "repository": github.repository}
    assert len(github.clear_issues()) == 3  # the task ran (eagerly here)
    tracker = api.get("/api/v1/tickets/tracker/").json()
    assert tracker["last_push_summary"]["created"] == 3 and tracker["last_error"] == ""
    assert github.token not in json.dumps(tracker)

    out = io.StringIO()
    call_command("push_tickets", project=project.name, stdout=out)
    assert json.loads(out.getvalue())["unchanged"] == 3 and len(github.clear_issues()) == 3

    # A failing tracker does not fail the request: the outcome is on the connection.
    api.patch(f"/api/v1/tickets/{Ticket.objects.filter(project=project).first().pk}/", {"status": "fixed"},
              format="json")
    api.put("/api/v1/tickets/tracker/", {"base_url": github.url, "repository": github.repository,
                                         "token": "ghp_revoked_0000000000"}, format="json")
    assert api.post("/api/v1/tickets/push/").status_code == 202
    assert "401" in api.get("/api/v1/tickets/tracker/").json()["last_error"]


def test_a_change_is_pushed_after_commit_when_a_tracker_is_connected(project, github,
                                                                     django_capture_on_commit_callbacks):
    tickets = _synthetic(project)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        connect(project, github)
        ticket_status_set(project=project, ticket=tickets[0], status="in_progress")
    assert len(callbacks) == 1 and len(github.clear_issues()) == 3  # the first push opens every issue
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        ticket_status_set(project=project, ticket=tickets[0], status="fixed")
    number = Ticket.objects.get(pk=tickets[0].pk).external_number
    assert len(callbacks) == 1 and github.issues[number]["state"] == "closed"
    IssueTrackerConnection.objects.filter(project=project).update(enabled=False)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        ticket_status_set(project=project, ticket=tickets[0], status="open")
    assert callbacks == [] and github.issues[number]["state"] == "closed"
