import json

import pytest
from django.test import Client

from traces.models import Span, Trace
from traces.services import trace_finalize

pytestmark = pytest.mark.django_db


def _post_json(key, body: bytes):
    return Client().post("/v1/traces", data=body, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def _file_spans(document: dict) -> list[dict]:
    return [span for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


def _attribute(span: dict, key: str):
    for item in span.get("attributes", []):
        if item["key"] == key:
            return next(iter(item["value"].values()))
    return None


def test_all_whowhen_traces_arrive_complete(issued_key, project, shared_dir):
    files = sorted((shared_dir / "datasets" / "whowhen-algorithm-generated").glob("Algorithm-Generated-*.json"))
    assert len(files) == 126
    expected = {}
    for path in files:
        body = path.read_bytes()
        response = _post_json(issued_key, body)
        assert response.status_code == 200, (path.name, response.content)
        assert "partialSuccess" not in response.json(), path.name
        spans = _file_spans(json.loads(body))
        trace_id = spans[0]["traceId"].lower()
        expected[trace_id] = {
            span["spanId"].lower(): (
                (span.get("parentSpanId") or "").lower(),
                _attribute(span, "gen_ai.agent.name"),
            )
            for span in spans
        }
    assert Trace.objects.filter(project=project).count() == 126
    for trace in Trace.objects.filter(project=project):
        trace_finalize(trace_pk=trace.pk)
        trace.refresh_from_db()
        stored = {s.span_id: s for s in Span.objects.filter(trace=trace)}
        wanted = expected[trace.trace_id]
        assert set(stored) == set(wanted), trace.trace_id
        for span_id, (parent, agent) in wanted.items():
            span = stored[span_id]
            assert span.parent_span_id == parent
            if agent:
                assert span.node == agent and span.kind == "AGENT"
        assert trace.outcome == "failure"
        assert trace.span_count == len(wanted)
        assert trace.task_id


FOLDERS = ["genkit", "langfuse-sdk", "openlit", "openllmetry", "pydantic-ai"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_otel_samples_are_stored_as_expect_json_says(issued_key, project, shared_dir, folder):
    root = shared_dir / "datasets" / "otel-samples" / folder
    expect = json.loads((root / "expect.json").read_text())
    for trace_expect in expect["traces"]:
        response = _post_json(issued_key, (root / trace_expect["file"]).read_bytes())
        assert response.status_code == 200, response.content
    for trace in Trace.objects.filter(project=project):
        trace_finalize(trace_pk=trace.pk)
    stored = {s.span_id: s for s in Span.objects.filter(project=project)}
    checked = 0
    for trace_expect in expect["traces"]:
        for span_expect in trace_expect["spans"]:
            span = stored[span_expect["spanId"].lower()]
            exp = span_expect["expected"]
            where = f"{folder}/{trace_expect['file']} {span_expect['name']}"
            assert span.kind == exp["kind"], where
            assert span.node == exp["node_name"], where
            assert (span.model or None) == exp["model"], where
            assert (span.input is not None) == exp["input_present"], where
            assert (span.output is not None) == exp["output_present"], where
            assert span.input_tokens == exp["input_tokens"], where
            assert span.output_tokens == exp["output_tokens"], where
            assert (span.parent_span_id or None) == exp["parent"], where
            assert span.usage_is_aggregate == span_expect["aggregate_usage"], where
            checked += 1
    assert checked == sum(len(t["spans"]) for t in expect["traces"]) > 0
