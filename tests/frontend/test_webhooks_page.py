"""Settings → Webhooks (issue 40): owners list, create, test and delete the project's webhooks; a URL is refused with
the very message the REST API answers; members get 403, outsiders and other projects' webhooks 404."""

from __future__ import annotations

from html import escape

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from clear.webhooks.models import Webhook, WebhookDelivery
from clear.webhooks.services import EVENTS, webhook_create
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

# A public address written as a literal: saving it asks no DNS. Nothing is delivered in these tests (the deliveries'
# on-commit sends never run in a test transaction), so nothing is sent to it either.
PUBLIC_URL = "https://93.184.216.34/hooks/clear"


def _url(project, suffix: str = "") -> str:
    return f"/p/{project.slug}/settings/webhooks/{suffix}"


def test_the_owner_lists_creates_tests_and_deletes_webhooks(project, owner):
    client = client_for(owner)
    html = client.get(f"/p/{project.slug}/settings/api-keys/").content.decode()
    assert f'href="{_url(project)}"' in html  # the Settings tabs link to it

    response = client.get(_url(project))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="empty-state"' in html and 'aria-current="page">Webhooks<' in html
    for event in EVENTS:  # every event offered, ticked by default
        assert f'value="{event}"' in html

    response = client.post(_url(project), {"url": PUBLIC_URL, "events": ["insight.created", "insight.regressed"],
                                           "description": "on-call bot"})
    assert response.status_code == 302 and response["Location"] == _url(project)
    webhook = Webhook.objects.get(project=project)
    assert (webhook.url, webhook.events, webhook.description) == (
        PUBLIC_URL, ["insight.created", "insight.regressed"], "on-call bot")
    html = client.get(_url(project)).content.decode()
    assert 'data-testid="issued-webhook-secret"' in html and webhook.secret in html  # once, like the API
    assert PUBLIC_URL in html and "on-call bot" in html and "Nothing sent yet" in html
    html = client.get(_url(project)).content.decode()
    assert webhook.secret not in html and webhook.secret[:10] + "…" in html

    response = client.post(_url(project, f"{webhook.pk}/test/"))
    assert response.status_code == 302
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert delivery.event == "webhook.ping" and delivery.status == "pending"
    html = client.get(_url(project)).content.decode()
    assert f'data-delivery="{delivery.pk}" data-status="pending"' in html and "Pending" in html
    assert "Test delivery (webhook.ping) queued" in html
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="delivered", attempts=1, response_code=200,
                                                          delivered_at=timezone.now(), next_attempt_at=None)
    html = client.get(_url(project)).content.decode()
    assert 'data-status="delivered"' in html and "Delivered" in html and "HTTP 200" in html

    response = client.post(_url(project, f"{webhook.pk}/delete/"))
    assert response.status_code == 302
    assert not Webhook.objects.filter(pk=webhook.pk).exists()
    assert not WebhookDelivery.objects.filter(pk=delivery.pk).exists()
    html = client.get(_url(project)).content.decode()
    assert "deleted" in html and 'data-testid="empty-state"' in html


@pytest.mark.parametrize("url", [
    "ftp://example.com/hook",  # not http(s)
    "http://10.0.0.1/hook",  # a private address
    "http://127.0.0.1:8200/admin/",  # loopback
    "http://169.254.169.254/latest/meta-data/",  # link-local: refused even when private addresses are allowed
])
def test_a_refused_url_shows_the_apis_message_on_the_form(project, owner, issued_key, settings, url):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = False
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    answer = api.post("/api/v1/webhooks/", {"url": url, "events": ["insight.created"]}, format="json")
    assert answer.status_code == 400, answer.content
    message = answer.json()["message"]
    assert message.startswith("url: ")

    response = client_for(owner).post(_url(project), {"url": url, "events": ["insight.created"]})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'data-testid="form-errors"' in html and escape(message) in html
    assert f'value="{escape(url)}"' in html  # what was typed stays in the field
    assert not Webhook.objects.filter(project=project).exists()


def test_the_services_other_checks_show_too(project, owner, settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    client = client_for(owner)
    response = client.post(_url(project), {"url": "http://127.0.0.1:8200/hook", "events": []})
    assert response.status_code == 400
    assert "Subscribe to at least one event" in response.content.decode()
    # CLEAR_WEBHOOK_ALLOW_PRIVATE lets the loopback URL the API would take through here too.
    response = client.post(_url(project), {"url": "http://127.0.0.1:8200/hook", "events": ["insight.created"]})
    assert response.status_code == 302
    assert Webhook.objects.filter(project=project, url="http://127.0.0.1:8200/hook").exists()


def test_members_who_are_not_owners_cannot_see_or_change_webhooks(project, teammate, outsider, outsider_project):
    webhook = webhook_create(project=project, url=PUBLIC_URL, events=["insight.created"])
    member = client_for(teammate)
    assert f'href="{_url(project)}"' not in member.get(f"/p/{project.slug}/settings/api-keys/").content.decode()
    assert member.get(_url(project)).status_code == 403
    assert member.post(_url(project), {"url": "https://93.184.216.35/x", "events": ["insight.created"]}
                       ).status_code == 403
    assert member.post(_url(project, f"{webhook.pk}/test/")).status_code == 403
    assert member.post(_url(project, f"{webhook.pk}/delete/")).status_code == 403

    stranger = client_for(outsider)
    assert stranger.get(_url(project)).status_code == 404
    assert stranger.post(_url(project), {"url": "https://93.184.216.35/x", "events": ["insight.created"]}
                         ).status_code == 404
    assert stranger.post(_url(project, f"{webhook.pk}/test/")).status_code == 404
    assert stranger.post(_url(project, f"{webhook.pk}/delete/")).status_code == 404

    assert list(Webhook.objects.filter(project=project)) == [webhook]
    assert not WebhookDelivery.objects.exists()


def test_another_projects_webhook_is_404(project, owner, outsider_project):
    theirs = webhook_create(project=outsider_project, url=PUBLIC_URL, events=["insight.created"])
    client = client_for(owner)
    assert client.post(_url(project, f"{theirs.pk}/test/")).status_code == 404
    assert client.post(_url(project, f"{theirs.pk}/delete/")).status_code == 404
    assert client.post(_url(project, f"{theirs.pk + 1000}/delete/")).status_code == 404
    assert Webhook.objects.filter(pk=theirs.pk).exists() and not WebhookDelivery.objects.exists()
    assert PUBLIC_URL not in client.get(_url(project)).content.decode()  # not listed either
    # Nor through its own project's URL: the owner is not a member there.
    assert client.post(_url(outsider_project, f"{theirs.pk}/delete/")).status_code == 404
