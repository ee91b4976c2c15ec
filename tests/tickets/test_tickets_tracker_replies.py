"""Nothing a tracker answers is echoed (issue 38): a failure is shown as its HTTP status and a fixed reason, never
the reply's body or its `message`, in any API answer (tracker, tickets, push) or page (tickets, tracker settings);
an issue's link (html_url) is kept only when it is https on the tracker's own host. Before, the `message` of a 4xx
JSON reply came back in the tracker's last_error and the ticket's push_error, and any html_url became the link."""

import json

import pytest

from diagnosis.models import Insight
from diagnosis.tickets.models import IssueTrackerConnection, Ticket
from diagnosis.tickets.services import ticket_sync_for_insights
from diagnosis.tickets.tracker import FAILURE_REASONS
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

MARKER = "ECHO-7f3a9c-from-the-tracker"
BODY = {"message": f"<b>{MARKER}</b>", "documentation_url": f"https://{MARKER}.example/docs",
        "errors": [{"message": MARKER, "code": MARKER, "field": MARKER}, MARKER]}


@pytest.fixture
def tickets(project):
    insights = [Insight.objects.create(project=project, level="node", node="planner", title=f"Problem {i}",
                                       fingerprint=f"{i + 1:040x}", frequency=0.1 * (i + 1)) for i in range(3)]
    ticket_sync_for_insights(project=project, insights=insights)
    return list(Ticket.objects.filter(project=project).order_by("pk"))


@pytest.fixture
def connected(api, github, tickets):
    response = api.put("/api/v1/tickets/tracker/", {"base_url": github.url, "repository": github.repository,
                                                    "token": github.token}, format="json")
    assert response.status_code == 200, response.content
    return github


def _everything_shown(api, owner, project) -> str:
    """Every API answer and page that shows the tracker's outcome, as one text."""
    client = client_for(owner)
    texts = [api.get("/api/v1/tickets/tracker/").content, api.get("/api/v1/tickets/?status=all").content]
    texts += [api.get(f"/api/v1/tickets/{pk}/").content
              for pk in Ticket.objects.filter(project=project).values_list("pk", flat=True)]
    texts += [api.get("/api/v1/tickets/export/?output=json&status=all").content,
              client.get(f"/p/{project.slug}/tickets/?status=all").content,
              client.get(f"/p/{project.slug}/settings/issue-tracker/").content]
    return "\n".join(text.decode() for text in texts)


@pytest.mark.parametrize("method, status, body, headers, reason", [
    ("GET", 401, BODY, {}, "bad credentials"),
    ("GET", 403, BODY, {}, "forbidden"),
    ("GET", 403, BODY, {"X-RateLimit-Remaining": "0"}, "rate limited"),
    ("GET", 404, BODY, {}, "not found"),
    ("GET", 429, BODY, {"Retry-After": MARKER}, "rate limited"),
    ("GET", 500, BODY, {}, "server error"),
    ("GET", 503, f"<html>{MARKER}</html>".encode(), {}, "server error"),
    ("GET", 418, BODY, {}, "unexpected reply"),
    ("GET", 200, f"<html>{MARKER}</html>".encode(), {}, "unexpected reply"),  # not JSON
    ("GET", 200, BODY, {}, "unexpected reply"),  # JSON, but no list of issues
    ("GET", 200, [], {"Link": f'<https://{MARKER}.example/next>; rel="next"'}, "unexpected reply"),  # off host
    ("POST", 201, {"number": MARKER, "html_url": MARKER}, {}, "unexpected reply"),
], ids=["401", "403", "403-rate-limit", "404", "429", "500", "503-html", "418", "200-html", "200-not-a-list",
        "next-page-elsewhere", "201-no-number"])
def test_a_failing_tracker_is_shown_as_its_status_and_a_fixed_reason(api, owner, project, connected, method, status,
                                                                     body, headers, reason):
    connected.replies[method] = (status, body, headers)
    response = api.post("/api/v1/tickets/push/")  # eager Celery: the push runs inside the request
    assert response.status_code == 202 and MARKER not in response.content.decode()

    tracker = api.get("/api/v1/tickets/tracker/").json()
    assert str(status) in tracker["last_error"] and reason in tracker["last_error"], tracker
    assert reason in FAILURE_REASONS
    shown = _everything_shown(api, owner, project)
    assert MARKER not in shown and "ECHO-7f3a9c" not in shown
    assert reason in shown
    assert not Ticket.objects.filter(project=project).exclude(external_url="").exists()


def test_a_refused_issue_keeps_the_status_and_reason_on_its_ticket_not_the_reply(api, owner, project, connected):
    connected.replies["POST"] = (422, BODY, {})
    api.post("/api/v1/tickets/push/")
    ticket = Ticket.objects.filter(project=project).order_by("pk").first()
    assert "422" in ticket.push_error and "refused" in ticket.push_error, ticket.push_error
    connection = IssueTrackerConnection.objects.get(project=project)
    assert connection.last_push_summary["failed"] == 3 and "422" in connection.last_error
    assert MARKER not in json.dumps(connection.last_push_summary)
    shown = _everything_shown(api, owner, project)
    assert MARKER not in shown and "push failed: " in shown

    # A tracker that cannot be reached: the same fixed words.
    api.put("/api/v1/tickets/tracker/", {"base_url": "http://127.0.0.1:9", "repository": connected.repository},
            format="json")
    api.post("/api/v1/tickets/push/")
    assert "could not connect" in api.get("/api/v1/tickets/tracker/").json()["last_error"]


LINKS = [
    ("https://elsewhere.example", False),
    (f"https://{MARKER}.example", False),
    ("http://127.0.0.1", False),  # the tracker's host, but not https
    ("https://127.0.0.1@elsewhere.example", False),
    ("https://elsewhere.example\\@127.0.0.1", False),  # a browser reads the host as elsewhere.example
    ("javascript:alert(1)//127.0.0.1", False),
    ("https://127.0.0.1", True),
    ("https://127.0.0.1:8443", True),  # the host counts, not the port
]


def test_an_issue_link_is_kept_only_on_the_trackers_own_host(api, owner, project, connected):
    for html_base, kept in LINKS:
        Ticket.objects.filter(project=project).update(external_number=None, external_url="", pushed_hash="")
        connected.issues.clear()
        connected.html_base = html_base
        api.post("/api/v1/tickets/push/")
        pushed = list(Ticket.objects.filter(project=project).order_by("pk"))
        assert len(connected.clear_issues()) == 3 and all(t.external_number for t in pushed), html_base
        expected = [connected.html_url(t.external_number) if kept else "" for t in pushed]
        assert [t.external_url for t in pushed] == expected, html_base
        if not kept:
            shown = _everything_shown(api, owner, project)
            assert MARKER not in shown and "elsewhere.example" not in shown and "javascript:" not in shown, html_base
