import ast
import json
import shutil
import subprocess
import time

import pytest
import redis
from django.test import Client

from clear.celery import app as celery_app
from tests.conftest import free_port
from tests.support.worker import point_at_broker
from tests.traces.otlp_helpers import agent_run_spans, to_protobuf
from clear.outbox.models import OutboxItem
from clear.outbox.services import outbox_dispatch
from traces.models import Span, Trace


class PrivateRedis:
    """A Redis of this test's own, so it can be stopped without disturbing anything else."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        subprocess.run([shutil.which("redis-server"), "--daemonize", "yes", "--bind", "127.0.0.1", "--port",
                        str(self.port), "--save", "", "--appendonly", "no"], check=True)
        client = redis.Redis(port=self.port)
        for _ in range(50):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("private redis did not start")

    def stop(self) -> None:
        try:
            redis.Redis(port=self.port).shutdown(nosave=True)
        except redis.ConnectionError:
            pass


@pytest.fixture
def private_broker():
    broker = PrivateRedis()
    broker.start()
    saved = celery_app.conf.broker_url, celery_app.conf.task_always_eager
    point_at_broker(broker.url)
    celery_app.conf.task_always_eager = False
    yield broker
    broker.stop()
    point_at_broker(saved[0])
    celery_app.conf.task_always_eager = saved[1]


@pytest.mark.django_db(transaction=True)
def test_ingestion_succeeds_with_redis_down_and_the_outbox_drains_later(issued_key, project, private_broker):
    private_broker.stop()
    started = time.monotonic()
    response = Client().post("/v1/traces", data=to_protobuf(agent_run_spans()),
                             content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert response.status_code == 200
    assert time.monotonic() - started < 5, "a broker outage must not hold the request (kombu alone retries ~6 s)"
    assert Span.objects.filter(project=project).count() == 4
    pending = OutboxItem.objects.get(dispatched_at__isnull=True)
    assert pending.attempts >= 1 and pending.last_error

    # While the broker is known to be down, further requests do not wait on it at all.
    started = time.monotonic()
    second = Client().post("/v1/traces", data=to_protobuf(agent_run_spans(task_id="task-2")),
                           content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert second.status_code == 200
    assert time.monotonic() - started < 2

    assert outbox_dispatch(ready_only=False) == 0  # still down: stays pending
    private_broker.start()
    assert outbox_dispatch(ready_only=False) == 2
    assert not OutboxItem.objects.filter(dispatched_at__isnull=True).exists()
    # One message carries both traces (the outbox sends one per dispatch round, not one per trace).
    messages = redis.Redis(port=private_broker.port).lrange("celery", 0, -1)
    assert len(messages) == 1
    headers = json.loads(messages[0])["headers"]
    assert headers["task"] == "traces.finalize_traces"
    assert sorted(ast.literal_eval(headers["argsrepr"])[0]) == sorted(
        str(pk) for pk in Trace.objects.filter(project=project).values_list("pk", flat=True))
