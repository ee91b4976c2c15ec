"""Settings → Issue tracker and the tickets page's "Push to tracker", against the fake GitHub of tests/tickets:
connect, edit (the token kept when left empty), errors from the service as messages, the token never rendered,
push through the page (eager Celery: the push runs inside the request), disconnect, outsiders get 404."""

from __future__ import annotations

import pytest

from diagnosis.services.insights import insights_build
from diagnosis.tickets.models import IssueTrackerConnection, Ticket
from tests.frontend.conftest import PAYLOADS, client_for
from tests.tickets.fake_github import FakeGitHub

pytestmark = pytest.mark.django_db


@pytest.fixture
def github(settings):
    # The fake listens on http://127.0.0.1: an address the tracker reaches only where the operator allows it.
    settings.CLEAR_TRACKER_ALLOW_PRIVATE = settings.CLEAR_TRACKER_ALLOW_HTTP = True
    server = FakeGitHub().start()
    yield server
    server.stop()


@pytest.fixture
def ticketed(seeded):
    insights_build(run=seeded.run)
    assert Ticket.objects.filter(project=seeded.project).count() >= 3
    return seeded


def _url(project, path: str = "") -> str:
    return f"/p/{project.slug}/settings/issue-tracker/{path}"


def test_connect_edit_push_disconnect(ticketed, owner, github):
    project, client = ticketed.project, client_for(owner)
    html = client.get(_url(project)).content.decode()
    assert 'data-testid="tracker-none"' in html and 'type="password"' in html
    tickets_html = client.get(f"/p/{project.slug}/tickets/").content.decode()
    assert 'data-testid="connect-tracker"' in tickets_html and 'data-testid="push-to-tracker"' not in tickets_html

    response = client.post(_url(project), {"base_url": github.url, "repository": github.repository,
                                           "token": github.token, "enabled": "on"}, follow=True)
    html = response.content.decode()
    assert response.status_code == 200 and "Issue tracker connected: acme/support-desk" in html
    connection = IssueTrackerConnection.objects.get(project=project)
    assert connection.token == github.token and connection.enabled and connection.base_url == github.url
    assert github.token not in html and github.token[-4:] not in html  # write-only: not even its last characters
    assert f'value="{github.repository}"' in html and 'name="token"' in html

    # Edit with the token left empty: the stored one is kept; disabling stops pushes.
    response = client.post(_url(project), {"base_url": github.url + "/", "repository": "acme/support-desk",
                                           "token": ""}, follow=True)
    connection.refresh_from_db()
    assert connection.token == github.token and not connection.enabled and connection.base_url == github.url
    assert "disabled: nothing is pushed" in response.content.decode()
    response = client.post(f"/p/{project.slug}/tickets/push/", follow=True)
    assert "is disabled" in response.content.decode() and not github.writes()

    # Enabled again, "Push to tracker" makes one issue per open ticket; the page shows the result.
    client.post(_url(project), {"base_url": github.url, "repository": github.repository, "token": "",
                                "enabled": "on"})
    response = client.post(f"/p/{project.slug}/tickets/push/", {"back": "all"})
    assert response.status_code == 302 and response["Location"].endswith("/tickets/?status=all")
    open_tickets = Ticket.objects.filter(project=project, status__in=["open", "in_progress"])
    assert len(github.clear_issues()) == open_tickets.count()
    html = client.get(f"/p/{project.slug}/tickets/").content.decode()
    assert f"{open_tickets.count()} created" in html and 'data-testid="push-to-tracker"' in html
    for ticket in open_tickets:
        assert f'href="{Ticket.objects.get(pk=ticket.pk).external_url}"' in html
    assert github.token not in html

    # A bad token: the tracker's refusal is shown on both pages as a message, never a stack trace.
    IssueTrackerConnection.objects.filter(project=project).update(token="ghp_wrong_token_000000000")
    Ticket.objects.filter(project=project).update(pushed_hash="")
    response = client.post(f"/p/{project.slug}/tickets/push/", follow=True)
    assert response.status_code == 200
    assert "rejected the token (401 Unauthorized)" in client.get(_url(project)).content.decode()
    assert 'data-testid="tracker-error"' in client.get(f"/p/{project.slug}/tickets/").content.decode()

    response = client.post(_url(project, "disconnect/"), follow=True)
    assert "Disconnected from acme/support-desk" in response.content.decode()
    assert not IssueTrackerConnection.objects.filter(project=project).exists()
    response = client.post(f"/p/{project.slug}/tickets/push/", follow=True)
    assert "no issue tracker" in response.content.decode()


def test_bad_input_gets_the_services_message(project, owner):
    client = client_for(owner)
    cases = [
        ({"base_url": "ftp://x", "repository": "a/b", "token": "t" * 20}, "base_url must be an absolute"),
        ({"base_url": "https://api.github.com", "repository": "no-slash", "token": "t" * 20},
         "repository must be &#x27;owner/name&#x27;"),
        ({"base_url": "https://api.github.com", "repository": "a/b", "token": ""}, "A token is required"),
        ({"base_url": "", "repository": "", "token": ""}, "This field is required"),
    ]
    for data, message in cases:
        response = client.post(_url(project), data)
        assert response.status_code == 400 and message in response.content.decode(), (data, message)
    assert not IssueTrackerConnection.objects.filter(project=project).exists()
    # What was typed comes back escaped; the token never does.
    response = client.post(_url(project), {"base_url": "https://api.github.com", "repository": PAYLOADS["img"],
                                           "token": "secret-token-typed-here"})
    html = response.content.decode()
    assert response.status_code == 400 and "repository must be" in html
    assert PAYLOADS["img"] not in html and "&lt;img src=" in html and "secret-token-typed-here" not in html


def test_outsiders_get_404_and_change_nothing(project, owner, outsider, outsider_project, github):
    client_for(owner).post(_url(project), {"base_url": github.url, "repository": github.repository,
                                           "token": github.token, "enabled": "on"})
    client = client_for(outsider)
    assert client.get(_url(project)).status_code == 404
    assert client.post(_url(project), {"base_url": "http://evil.example", "repository": "e/v",
                                       "token": "x" * 20}).status_code == 404
    assert client.post(_url(project, "disconnect/")).status_code == 404
    assert client.post(f"/p/{project.slug}/tickets/push/").status_code == 404
    connection = IssueTrackerConnection.objects.get(project=project)
    assert connection.base_url == github.url and connection.token == github.token
    assert client.get(_url(project)).status_code == 404
    assert client_for(owner).get(f"/p/{project.slug}/tickets/push/").status_code == 405
