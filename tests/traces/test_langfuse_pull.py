"""`manage.py langfuse_pull` against a fake Langfuse public API served on 127.0.0.1."""

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import free_port
from traces.models import Score, Span, Trace
from traces.normalize.values import langfuse_trace_id

pytestmark = pytest.mark.django_db

PUBLIC, SECRET = "pk-lf-test", "sk-lf-test"
FROM, TO = "2025-03-01T00:00:00.000Z", "2025-03-02T00:00:00.000Z"

T1 = "5f0c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"  # a uuid, as Langfuse SDKs create
T2 = "trace-two"  # an arbitrary id
T3 = "0af7651916cd43dd8448eb211c80319c"  # 32 hex, as OTel-based SDKs create
T_OUT = "trace-outside-the-window"

TRACES = [
    {"id": T1, "timestamp": "2025-03-01T10:00:00.000Z", "name": "support-ticket", "release": "v3",
     "userId": "u-1", "sessionId": "s-1", "tags": ["prod"], "metadata": {"team": "desk"},
     "input": {"question": "where is my order?"}, "output": "on its way", "observations": [], "scores": []},
    {"id": T2, "timestamp": "2025-03-01T11:00:00.000Z", "name": "rag-query", "release": "v3",
     "input": "what is the refund policy?", "output": None, "tags": [], "metadata": None},
    {"id": T3, "timestamp": "2025-03-01T12:00:00.000Z", "name": "ping", "environment": "production"},
    {"id": T_OUT, "timestamp": "2025-02-01T12:00:00.000Z", "name": "old"},
]


def _obs(obs_id, trace_id, obs_type, name, start, parent=None, **extra):
    return {"id": obs_id, "traceId": trace_id, "type": obs_type, "name": name, "startTime": start,
            "endTime": start.replace(".000Z", ".900Z"), "parentObservationId": parent, "level": "DEFAULT",
            "metadata": {}, "input": None, "output": None, "model": None, "usage": None, **extra}


OBSERVATIONS = [
    _obs("obs-agent", T1, "AGENT", "planner", "2025-03-01T10:00:01.000Z"),
    _obs("obs-gen", T1, "GENERATION", "chat", "2025-03-01T10:00:02.000Z", parent="obs-agent", model="gpt-4o",
         input=[{"role": "user", "content": "where is my order?"}], output={"role": "assistant", "content": "x"},
         usage={"input": 100, "output": 20, "total": 120, "unit": "TOKENS"},
         usageDetails={"input": 100, "output": 20, "total": 120}, costDetails={"input": 0.001, "total": 0.0015},
         modelParameters={"temperature": 0.2}),
    _obs("obs-tool", T1, "TOOL", "order_lookup", "2025-03-01T10:00:03.000Z", parent="obs-agent",
         level="ERROR", statusMessage="timeout"),
    _obs("obs-retrieve", T2, "SPAN", "retrieve", "2025-03-01T11:00:01.000Z"),
    _obs("obs-answer", T2, "GENERATION", "answer", "2025-03-01T11:00:02.000Z", model="gpt-4o-mini",
         usage={"input": 50, "output": 10, "total": 60, "unit": "TOKENS", "totalCost": 0.0002},
         calculatedTotalCost=0.0002, promptName="rag", promptVersion=3),
    _obs("obs-event", T3, "EVENT", "cache-hit", "2025-03-01T12:00:01.000Z"),
    _obs("obs-late", T3, "SPAN", "noop", "2025-03-01T12:00:02.000Z"),
    _obs("obs-old", T_OUT, "SPAN", "old", "2025-02-01T12:00:01.000Z"),
]

SCORES = [
    {"id": "score-1", "traceId": T1, "name": "outcome", "value": 1.0, "dataType": "NUMERIC", "source": "API",
     "timestamp": "2025-03-01T10:05:00.000Z", "observationId": None, "comment": "resolved"},
    {"id": "score-2", "traceId": T2, "name": "outcome", "value": None, "stringValue": "fail",
     "dataType": "CATEGORICAL", "source": "ANNOTATION", "timestamp": "2025-03-01T11:05:00.000Z"},
    {"id": "score-3", "traceId": None, "sessionId": "s-1", "name": "session-quality", "value": 0.5,
     "dataType": "NUMERIC", "source": "API", "timestamp": "2025-03-01T10:06:00.000Z"},
    {"id": "score-4", "traceId": T_OUT, "name": "late-review", "value": 0.0, "dataType": "NUMERIC",
     "source": "ANNOTATION", "timestamp": "2025-03-01T13:00:00.000Z"},
    {"id": "score-old", "traceId": T_OUT, "name": "outcome", "value": 0.0, "dataType": "NUMERIC",
     "source": "API", "timestamp": "2025-02-01T13:00:00.000Z"},
]


class FakeLangfuse:
    """The read side of the Langfuse public API: paginated lists filtered by the time window, Basic auth."""

    def __init__(self, *, observations_v1: bool = True, throttle_once: bool = True) -> None:
        self.observations_v1 = observations_v1
        self.throttle_once = throttle_once
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.refused = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                fake.handle(self)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeLangfuse":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, path: str) -> list[dict[str, str]]:
        return [params for p, params in self.requests if p == path]

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        expected = "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            self.refused += 1
            return self._send(request, 401, {"message": "Invalid credentials. Confirm that you've configured "
                                                        "the correct host.", "error": "UnauthorizedError"})
        self.requests.append((url.path, params))
        if url.path == "/api/public/traces":
            items = self._window(TRACES, "timestamp", params, "fromTimestamp", "toTimestamp")
            return self._page(request, items, params)
        if url.path == "/api/public/observations" and self.observations_v1:
            if self.throttle_once and params.get("page") == "2":
                self.throttle_once = False
                return self._send(request, 429, {"message": "rate limited"}, {"Retry-After": "0"})
            return self._page(request, self._window(OBSERVATIONS, "startTime", params, "fromStartTime",
                                                    "toStartTime"), params)
        if url.path == "/api/public/v2/observations" and not self.observations_v1:
            items = self._window(OBSERVATIONS, "startTime", params, "fromStartTime", "toStartTime")
            offset = int(base64.b64decode(params["cursor"]).decode()) if "cursor" in params else 0
            limit = int(params.get("limit", 50))
            chunk = items[offset:offset + limit]
            meta = {"cursor": base64.b64encode(str(offset + limit).encode()).decode()} \
                if offset + limit < len(items) else {}
            data = [{k: v for k, v in o.items() if k not in ("model", "usage")} | {"providedModelName": o["model"]}
                    for o in chunk]
            return self._send(request, 200, {"data": data, "meta": meta})
        if url.path == "/api/public/v2/scores":
            return self._page(request, self._window(SCORES, "timestamp", params, "fromTimestamp", "toTimestamp"),
                              params)
        return self._send(request, 404, {"message": f"{url.path} not found"})

    @staticmethod
    def _window(items, key, params, low, high):
        out = [i for i in items if (low not in params or i[key] >= params[low])
               and (high not in params or i[key] < params[high])]
        return sorted(out, key=lambda i: (i[key], i["id"]))

    def _page(self, request, items, params):
        page, limit = int(params.get("page", 1)), int(params.get("limit", 50))
        total_pages = max(1, -(-len(items) // limit))
        data = items[(page - 1) * limit: page * limit]
        meta = {"page": page, "limit": limit, "totalItems": len(items), "totalPages": total_pages}
        return self._send(request, 200, {"data": data, "meta": meta})

    @staticmethod
    def _send(request, status, body, headers=None):
        payload = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            request.send_header(key, value)
        request.end_headers()
        request.wfile.write(payload)


def _pull(project, host, *, public=PUBLIC, secret=SECRET, extra=()):
    out = StringIO()
    call_command("langfuse_pull", "--project", project.name, "--host", host, "--public-key", public,
                 "--secret-key", secret, "--from", FROM, "--to", TO, "--page-size", "2", "--json", *extra,
                 stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def _assert_stored(project):
    traces = {t.trace_id: t for t in Trace.objects.filter(project=project)}
    assert set(traces) == {langfuse_trace_id(T1), langfuse_trace_id(T2), T3}
    assert Span.objects.filter(project=project).count() == 3 + 7  # one root per trace + the observations
    one = traces[langfuse_trace_id(T1)]
    nodes = dict(one.spans.values_list("name", "node"))
    assert nodes["chat"] == nodes["order_lookup"] == nodes["planner"] == "planner"
    assert (one.outcome, one.outcome_source, one.score) == ("success", "score", 1.0)
    assert (one.release, one.user_id, one.session_id, one.tags) == ("v3", "u-1", "s-1", ["prod"])
    assert (one.input_tokens, one.output_tokens, one.error_count, one.span_count) == (100, 20, 1, 4)
    chat = one.spans.get(name="chat")
    assert (chat.kind, chat.model, chat.cost) == ("LLM", "gpt-4o", 0.0015)
    two = traces[langfuse_trace_id(T2)]
    assert two.outcome == "failure"
    assert two.spans.get(name="answer").cost == 0.0002
    assert traces[T3].spans.get(name="cache-hit").kind == "EVENT"
    assert set(Score.objects.filter(project=project).values_list("external_id", flat=True)) == {"score-1", "score-2"}
    assert all(t.finalized_at for t in traces.values())


def test_it_pulls_the_window_page_by_page_and_a_re_pull_duplicates_nothing(project):
    with FakeLangfuse() as fake:
        summary = _pull(project, fake.url + "/")

        assert (summary["traces"], summary["observations"], summary["scores"]) == (3, 7, 2)
        assert summary["scores_skipped"] == 2  # a session score, and one whose trace is outside the window
        assert summary["events_refused"] == []
        assert (summary["spans_created"], summary["spans_already_present"]) == (10, 0)
        assert (summary["traces_touched"], summary["traces_created"]) == (3, 3)
        assert summary["retries"] == 1  # the 429 on observations page 2, retried after Retry-After
        _assert_stored(project)

        traces = fake.calls("/api/public/traces")
        assert [c["page"] for c in traces] == ["1", "2"]
        assert all((c["fromTimestamp"], c["toTimestamp"], c["limit"]) == (FROM, TO, "2") for c in traces)
        observations = fake.calls("/api/public/observations")
        assert [c["page"] for c in observations] == ["1", "2", "2", "3", "4"]
        assert all((c["fromStartTime"], c["toStartTime"]) == (FROM, TO) for c in observations)
        scores = fake.calls("/api/public/v2/scores")
        assert [c["page"] for c in scores] == ["1", "2"]
        assert all((c["fromTimestamp"], c["toTimestamp"]) == (FROM, TO) for c in scores)

        again = _pull(project, fake.url)
        assert (again["traces"], again["observations"], again["scores"]) == (3, 7, 2)
        assert again["spans_created"] == 0 and again["spans_already_present"] == 10
        assert again["traces_created"] == 0
        _assert_stored(project)


def test_without_the_v1_observations_api_it_follows_the_v2_cursor(project):
    with FakeLangfuse(observations_v1=False) as fake:
        summary = _pull(project, fake.url)
        assert summary["observations_api"] == "v2"
        assert (summary["traces"], summary["observations"], summary["scores"]) == (3, 7, 2)
        calls = fake.calls("/api/public/v2/observations")
        assert len(calls) == 4 and "cursor" not in calls[0] and all("cursor" in c for c in calls[1:])
        assert all((c["fromStartTime"], c["toStartTime"]) == (FROM, TO) for c in calls)
        assert "io" in calls[0]["fields"] and "usage" in calls[0]["fields"]
        _assert_stored(project)


def test_refused_keys_and_an_unreachable_host_are_clear_errors(project):
    with FakeLangfuse() as fake:
        with pytest.raises(CommandError, match=rf"keys were refused by {fake.url} \(HTTP 401.*check --public-key "
                                               r"and --secret-key"):
            _pull(project, fake.url, secret="sk-lf-wrong")
        assert fake.refused == 1 and fake.requests == []
    assert not Trace.objects.exists()

    port = free_port()
    with pytest.raises(CommandError, match=rf"Could not reach Langfuse at http://127.0.0.1:{port}.*Check --host"):
        _pull(project, f"http://127.0.0.1:{port}")
    with pytest.raises(CommandError, match="--host must be the Langfuse base URL"):
        _pull(project, "langfuse.example.com")
    with pytest.raises(CommandError, match="No project named 'Nobody'"):
        call_command("langfuse_pull", "--project", "Nobody", "--host", "http://127.0.0.1:1", "--public-key", "p",
                     "--secret-key", "s", "--from", FROM, stdout=StringIO(), stderr=StringIO())
