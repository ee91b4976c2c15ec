"""A body sent with Transfer-Encoding: chunked (no Content-Length), as HTTP/1.1 clients stream it, through the
deployed server (gunicorn): stored like any other (it was read as empty before: 400 "not valid JSON" for a valid
body), and held to CLEAR_INGEST_MAX_BODY_BYTES as sent and after decompression (413) (issue 38)."""

import gzip
import http.client
import json

import pytest

from tests.conftest import free_port
from tests.traces.otlp_helpers import agent_run_spans, to_json
from tests.traces.test_ingest_loss import Gunicorn
from traces.models import Span, Trace

CAP = 200_000


class CappedGunicorn(Gunicorn):
    """The loss test's gunicorn, with a small body limit so the 413s cost little to send."""

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "CLEAR_INGEST_MAX_BODY_BYTES": str(CAP)}


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    gunicorn = CappedGunicorn(free_port())
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
