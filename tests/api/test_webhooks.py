import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rest_framework.test import APIClient

from clear.webhooks.models import WebhookDelivery
from clear.webhooks.services import webhook_deliveries_sweep, webhook_event_emit
from clear.webhooks.tasks import deliver_webhook

pytestmark = pytest.mark.django_db


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that records what it is sent and answers with the given statuses in turn.

    127.0.0.1 is a loopback address: a test delivering to it sets CLEAR_WEBHOOK_ALLOW_PRIVATE, as an on-premise
    operator would. `connections` counts TCP connections, whether or not a request followed."""

    def __init__(self, statuses=(200,), body: bytes | None = None, location: str = ""):
        self.statuses = list(statuses)
        self.requests: list[dict] = []
        self.connections = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self):
                receiver.connections += 1
                super().setup()

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                if location:
                    self.send_header("Location", location)
                self.end_headers()
                if receiver.body is not None:
                    self.wfile.write(receiver.body)
                else:
                    self.wfile.write(b"ok" if status < 300 else b"receiver broke")

            def log_message(self, *args):
                pass

        self.body = body
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/clear"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _local_receivers_allowed(settings):
    # These tests deliver to a Receiver (or a closed port) on 127.0.0.1; tests/api/test_webhook_targets.py has the
    # refusals without this setting.
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def _subscribe(client, url, events=("diagnosis_run.finished",)) -> dict:
    response = client.post("/api/v1/webhooks/", {"url": url, "events": list(events)}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _signature_ok(request: dict, secret: str) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(request["headers"]["X-Clear-Signature"], expected)


def test_a_failed_delivery_is_retried_and_logged(client, project, django_capture_on_commit_callbacks):
    with Receiver(statuses=[500, 200]) as receiver:
        webhook = _subscribe(client, receiver.url)
        assert webhook["secret"].startswith("whsec_")
        with django_capture_on_commit_callbacks(execute=True):
            webhook_event_emit(project=project, event="diagnosis_run.finished", payload={"run": {"id": "r-1"}})
    assert len(receiver.requests) == 2  # a 500, then the retry (eager tasks retry at once)
    first, second = receiver.requests
    assert first["headers"]["X-Clear-Delivery"] == second["headers"]["X-Clear-Delivery"]
    assert first["body"] == second["body"]
    assert all(_signature_ok(r, webhook["secret"]) for r in receiver.requests)
    assert not _signature_ok(first, "another secret")
    assert first["headers"]["X-Clear-Event"] == "diagnosis_run.finished"
    payload = json.loads(second["body"])
    assert payload["event"] == "diagnosis_run.finished" and payload["data"] == {"run": {"id": "r-1"}}
    assert payload["id"] == first["headers"]["X-Clear-Delivery"] and payload["project"]["id"] == str(project.pk)

    log = client.get(f"/api/v1/webhooks/{webhook['id']}/deliveries/").json()["results"]
    assert len(log) == 1
    entry = log[0]
    assert entry["id"] == payload["id"] and entry["status"] == "delivered" and entry["attempts"] == 2
    assert entry["response_code"] == 200 and entry["delivered_at"]
    assert entry["response_body"] == ""  # a private address's answer is not shown, even when allowed
    assert entry["next_attempt_at"] is None

    # A redelivered message for a delivered event sends nothing.
    deliver_webhook.delay(entry["id"])
    assert len(receiver.requests) == 2


def test_a_delivery_gives_up_after_the_last_attempt(client, project, settings, django_capture_on_commit_callbacks):
    settings.CLEAR_WEBHOOK_MAX_ATTEMPTS = 3
    with Receiver(statuses=[503]) as receiver:
        webhook = _subscribe(client, receiver.url)
        with django_capture_on_commit_callbacks(execute=True):
            webhook_event_emit(project=project, event="diagnosis_run.finished", payload={})
    assert len(receiver.requests) == 3
    delivery = WebhookDelivery.objects.get(webhook_id=webhook["id"])
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("failed", 3, 503)
    assert delivery.response_body == ""  # what a private address answered is never kept


def test_an_unreachable_url_is_retried_with_growing_backoff(project, settings):
    from datetime import timedelta

    from django.utils import timezone

    from clear.webhooks.services import webhook_create, webhook_delivery_attempt

    settings.CLEAR_WEBHOOK_BACKOFF_SECONDS = 10
    webhook = webhook_create(project=project, url="http://127.0.0.1:9/closed", events=["insight.created"])
    [delivery] = webhook_event_emit(project=project, event="insight.created", payload={})
    waits = [webhook_delivery_attempt(delivery_id=delivery.pk) for _ in range(3)]
    assert waits == [10, 20, 40]
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.response_code is None and "ConnectionError" in delivery.error
    assert delivery.next_attempt_at > timezone.now() + timedelta(seconds=30)
    assert webhook.active


def test_the_sweep_resends_deliveries_whose_message_was_lost(client, project):
    from datetime import timedelta

    from django.utils import timezone

    with Receiver() as receiver:
        webhook = _subscribe(client, receiver.url, events=["insight.created", "insight.regressed"])
        # No on-commit callbacks: the message is never sent, as when the broker is down.
        webhook_event_emit(project=project, event="insight.regressed", payload={"insight": 1})
        webhook_event_emit(project=project, event="diagnosis_run.finished", payload={})  # not subscribed
        assert receiver.requests == []
        assert webhook_deliveries_sweep() == 0  # not due yet: its message may just be slow
        assert webhook_deliveries_sweep(now=timezone.now() + timedelta(minutes=5)) == 1
    assert [r["headers"]["X-Clear-Event"] for r in receiver.requests] == ["insight.regressed"]
    assert WebhookDelivery.objects.get(webhook_id=webhook["id"]).status == "delivered"


def test_webhook_crud_and_ping(client, project, django_capture_on_commit_callbacks):
    with Receiver() as receiver:
        webhook = _subscribe(client, receiver.url)
        url = f"/api/v1/webhooks/{webhook['id']}/"
        detail = client.get(url).json()
        assert "secret" not in detail and detail["secret_hint"].startswith("whsec_")
        updated = client.patch(url, {"events": ["insight.created"], "description": "CI"}, format="json").json()
        assert updated["events"] == ["insight.created"] and updated["description"] == "CI"
        with django_capture_on_commit_callbacks(execute=True):
            ping = client.post(url + "ping/")
        assert ping.status_code == 202
        assert receiver.requests[0]["headers"]["X-Clear-Event"] == "webhook.ping"
        assert client.get(url + "deliveries/", {"status": "delivered"}).json()["results"][0]["id"] == ping.json()["id"]
        assert client.get("/api/v1/webhooks/").json()["results"][0]["id"] == webhook["id"]
        assert client.delete(url).status_code == 204
        assert client.get(url).status_code == 404
        assert not WebhookDelivery.objects.exists()


@pytest.mark.parametrize("body, words", [
    ({"url": "ftp://example.com/x", "events": ["insight.created"]}, "url"),
    ({"url": "http://example.com/x", "events": ["nope"]}, "events"),
    ({"url": "http://example.com/x", "events": []}, "events"),
    ({"url": "http://example.com/x", "events": ["insight.created"], "secret": "short"}, "secret"),
])
def test_invalid_webhooks_are_refused(client, body, words):
    response = client.post("/api/v1/webhooks/", body, format="json")
    assert response.status_code == 400 and words in response.json()["message"].lower()


def test_a_finished_run_is_announced(client, project, settings, django_capture_on_commit_callbacks):
    settings.CLEAR_JUDGE_MODEL = ""
    from tests.api.conftest import make_trace

    make_trace(project, release="v2")
    with Receiver() as receiver:
        webhook = _subscribe(client, receiver.url)
        with django_capture_on_commit_callbacks(execute=True):
            run = client.post("/api/v1/runs/", {"release": "v2", "judges": ["rules"]}, format="json").json()
    run = client.get(f"/api/v1/runs/{run['id']}/").json()
    assert run["status"] == "succeeded"
    [request] = receiver.requests
    assert _signature_ok(request, webhook["secret"])
    body = json.loads(request["body"])
    assert body["event"] == "diagnosis_run.finished"
    assert body["data"]["run"]["id"] == run["id"] and body["data"]["run"]["status"] == "succeeded"
    assert body["data"]["run"]["total_count"] == 1


def test_a_cancelled_run_is_announced(project, django_capture_on_commit_callbacks):
    from clear.webhooks.services import webhook_create
    from diagnosis.models import DiagnosisRun
    from diagnosis.services import diagnosis_run_cancel

    webhook = webhook_create(project=project, url="http://127.0.0.1:9/x", events=["diagnosis_run.finished"])
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):  # the fact reaches webhooks.emit after commit
        diagnosis_run_cancel(run=run)
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert delivery.payload["data"]["run"]["status"] == "cancelled"
