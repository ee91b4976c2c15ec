"""A body sent with Transfer-Encoding: chunked (no Content-Length), as HTTP/1.1 clients stream it, through the
deployed server (gunicorn): stored like any other (it was read as empty before: 400 "not valid JSON" for a valid
body), and held to CLEAR_INGEST_MAX_BODY_BYTES as sent and after decompression (413) (issue 38)."""

import gzip
import http.client
import json
import os
import subprocess
import sys
import time

import pytest
from django.conf import settings

from tests.conftest import free_port
from tests.support.worker import ProcessGroup, subprocess_env_for_test_db
from tests.traces.otlp_helpers import agent_run_spans, to_json
from traces.models import Span, Trace

CAP = 200_000


class Gunicorn(ProcessGroup):
    def __init__(self, port: int, log_path):
        self.port, self.log_path = port, log_path
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> None:
        env = subprocess_env_for_test_db(REDIS_URL=settings.CELERY_BROKER_URL, LOG_LEVEL="WARNING",
                                         CLEAR_INGEST_MAX_BODY_BYTES=str(CAP))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "clear.wsgi:application", "--bind", f"127.0.0.1:{self.port}",
             "--workers", "2", "--timeout", "60"],
            cwd=settings.BASE_DIR, env=env, stdout=self.log_path.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited at start:\n{self.log_path.read_text()[-4000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/v1/traces")
                conn.getresponse().read()
                conn.close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gunicorn not ready after {timeout}s:\n{self.log_path.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    gunicorn = Gunicorn(free_port(), tmp_path_factory.mktemp("gunicorn") / f"gunicorn-{os.getpid()}.log")
    gunicorn.start()
    yield gunicorn
    gunicorn.stop()


def _chunks(body: bytes, size: int = 8192):
    # A generator has no length: http.client sends it chunked, with no Content-Length.
    for start in range(0, len(body), size):
        yield body[start:start + size]


def _post_chunked(server, path: str, body: bytes, headers: dict) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", path, body=_chunks(body), headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_is_read_and_stored(server, issued_key, project):
    auth = {"Authorization": f"Bearer {issued_key.secret}"}
    spans = agent_run_spans(release="chunked")
    status, content = _post_chunked(server, "/v1/traces", to_json(spans), {**auth, "Content-Type": "application/json"})
    assert status == 200, content
    assert Span.objects.filter(project=project, trace__release="chunked").count() == len(spans)

    # gzip-compressed and chunked: decompressed as with a Content-Length.
    spans = agent_run_spans(release="chunked-gzip", task_id="task-2")
    status, content = _post_chunked(server, "/v1/traces", gzip.compress(to_json(spans)),
                                    {**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert status == 200, content
    assert Span.objects.filter(project=project, trace__release="chunked-gzip").count() == len(spans)

    batch = {"batch": [
        {"id": "e1", "type": "trace-create", "timestamp": "2025-01-01T00:00:00Z",
         "body": {"id": "lf-chunked", "name": "chunked", "release": "lf-chunked"}},
        {"id": "e2", "type": "span-create", "timestamp": "2025-01-01T00:00:00Z",
         "body": {"id": "obs-1", "traceId": "lf-chunked", "name": "step", "startTime": "2025-01-01T00:00:00Z"}}]}
    status, content = _post_chunked(server, "/api/public/ingestion", json.dumps(batch).encode(),
                                    {**auth, "Content-Type": "application/json"})
    assert status == 207, content
    assert [e["id"] for e in json.loads(content)["successes"]] == ["e1", "e2"]
    assert Trace.objects.filter(project=project, release="lf-chunked").exists()


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_past_the_cap_is_a_413_as_sent_and_after_decompression(server, issued_key, project):
    auth = {"Authorization": f"Bearer {issued_key.secret}", "Content-Type": "application/json"}
    spans = agent_run_spans(release="too-big")
    padded = to_json(spans)[:-1] + b', "padding": "' + b"x" * CAP + b'"}'
    status, content = _post_chunked(server, "/v1/traces", padded, auth)
    assert status == 413 and b"CLEAR_INGEST_MAX_BODY_BYTES" in content, (status, content)
    bomb = gzip.compress(padded)
    assert len(bomb) < CAP // 10
    status, content = _post_chunked(server, "/v1/traces", bomb, {**auth, "Content-Encoding": "gzip"})
    assert status == 413 and b"CLEAR_INGEST_MAX_BODY_BYTES" in content, (status, content)
    status, content = _post_chunked(server, "/api/public/ingestion", b'{"batch": [], "pad": "' + b"y" * CAP + b'"}',
                                    auth)
    assert status == 413, (status, content)
    assert not Span.objects.filter(project=project).exists()
