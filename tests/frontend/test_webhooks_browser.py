"""Settings → Webhooks in Chromium (issue 40): an owner subscribes a local receiver, sends a test delivery, which a
real Celery worker sends (the page queues `webhooks.deliver` on commit, as the API's ping does), sees it arrive,
signed, and the page show it delivered, then deletes the webhook.

The receiver listens on 127.0.0.1, a loopback address: the server and the worker run with
CLEAR_WEBHOOK_ALLOW_PRIVATE, as an on-premise operator would set it."""

from __future__ import annotations

import json
import time

import pytest

from clear.webhooks.models import Webhook, WebhookDelivery
from tests.api.test_webhooks import Receiver, _signature_ok
from tests.frontend.support import Checker, login
from tests.support.browser import screenshot
from tests.support.worker import own_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def webhook_worker(transactional_db, settings):
    """A real worker of its own: the shared one (conftest's `celery_worker`) may have started without
    CLEAR_WEBHOOK_ALLOW_PRIVATE, and it is read from the environment when the worker starts."""
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True  # the live server, in this process
    with own_worker(settings, CLEAR_WEBHOOK_ALLOW_PRIVATE="1") as worker:
        yield worker


def test_an_owner_walks_the_webhooks_page(live_server, page, project, owner, webhook_worker, axe_path):
    check = Checker(page, axe_path)
    with Receiver() as receiver:
        login(page, live_server.url)
        page.goto(f"{live_server.url}/p/{project.slug}/settings/api-keys/")
        page.click("nav[aria-label=Settings] >> text=Webhooks")
        page.wait_for_load_state()
        assert page.url.endswith(f"/p/{project.slug}/settings/webhooks/")
        assert page.locator("[data-testid=empty-state]").is_visible()
        check("ui-settings-webhooks-empty")

        # Refused as the API refuses it: link-local stays out even with private addresses allowed.
        page.fill("#id_url", "http://169.254.169.254/latest/meta-data/")
        page.click("[data-testid=webhook-create]")
        page.wait_for_load_state()
        assert "169.254.169.254" in page.inner_text("[data-testid=form-errors]")
        assert not Webhook.objects.filter(project=project).exists()

        page.fill("#id_url", receiver.url)
        page.fill("#id_description", "local receiver")
        page.click("[data-testid=webhook-create]")
        page.wait_for_load_state()
        webhook = Webhook.objects.get(project=project)
        assert webhook.url == receiver.url and webhook.description == "local receiver"
        assert page.inner_text("[data-testid=issued-webhook-secret]") == webhook.secret
        assert receiver.url in page.inner_text(f"[data-webhook='{webhook.pk}']")

        page.click(f"[data-webhook='{webhook.pk}'] [data-testid=webhook-test]")
        page.wait_for_load_state()
        assert "Test delivery (webhook.ping) queued" in page.inner_text(".messages")
        assert page.locator("[data-testid=issued-webhook-secret]").count() == 0  # shown once

        deadline = time.monotonic() + 60
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.2)
        assert receiver.requests, webhook_worker.log()[-4000:]
        request = receiver.requests[0]
        body = json.loads(request["body"])
        assert body["event"] == "webhook.ping" and request["headers"]["X-Clear-Event"] == "webhook.ping"
        assert _signature_ok(request, webhook.secret)
        delivery = WebhookDelivery.objects.get(webhook=webhook)
        assert request["headers"]["X-Clear-Delivery"] == str(delivery.pk) == body["id"]

        row = page.locator(f"[data-webhook='{webhook.pk}'] tr[data-delivery='{delivery.pk}']")
        deadline = time.monotonic() + 30
        while row.get_attribute("data-status") != "delivered" and time.monotonic() < deadline:
            page.wait_for_timeout(500)
            page.click("[data-testid=webhooks-refresh]")
            page.wait_for_load_state()
        assert row.get_attribute("data-status") == "delivered", webhook_worker.log()[-4000:]
        assert row.locator("[data-testid=delivery-status]").inner_text() == "Delivered"
        assert "webhook.ping" in row.inner_text() and "HTTP 200" in row.inner_text()
        check("ui-settings-webhooks-delivered")
        screenshot(page, "ui-settings-webhooks")

        dialogs: list[str] = []
        page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
        page.click(f"[data-webhook='{webhook.pk}'] [data-testid=webhook-delete]")
        page.wait_for_load_state()
        assert dialogs and receiver.url in dialogs[0]
        assert "deleted" in page.inner_text(".messages")
        assert page.locator("[data-testid=empty-state]").is_visible()
        assert not Webhook.objects.filter(pk=webhook.pk).exists()
        assert len(receiver.requests) == 1
    check.assert_clean()
