import base64
import uuid

import pytest
from django.test import Client
from opentelemetry.sdk.trace import TracerProvider

from traces.models import Score, Span, Trace
from traces.services import trace_finalize


def _basic(key) -> str:
    return "Basic " + base64.b64encode(f"{key.api_key.public_key}:{key.secret}".encode()).decode()


@pytest.mark.django_db(transaction=True)
def test_the_langfuse_sdk_pointed_at_clear_delivers_complete_traces(live_server, issued_key, project):
    from langfuse import Langfuse

    client = Langfuse(public_key=issued_key.api_key.public_key, secret_key=issued_key.secret,
                      base_url=live_server.url, tracer_provider=TracerProvider(), release="r7", flush_at=1)
    assert client.auth_check()
    with client.start_as_current_observation(name="support-run", as_type="agent", input={"q": "refund"}) as agent:
        with client.start_as_current_observation(name="chat", as_type="generation", model="gpt-4o-mini",
                                                 input=[{"role": "user", "content": "refund?"}]) as generation:
            generation.update(output={"role": "assistant", "content": "sure"},
                              usage_details={"input": 11, "output": 7})
        with client.start_as_current_observation(name="refund_lookup", as_type="tool", input={"order": 1}) as tool:
            tool.update(output={"error": "not found"}, level="ERROR", status_message="order not found")
        agent.update(output="done")
        trace_id = client.get_current_trace_id()
    client.create_score(trace_id=trace_id, name="outcome", value=0.0, data_type="NUMERIC")
    client.flush()
    client.shutdown()

    trace = Trace.objects.get(project=project, trace_id=trace_id)
    trace_finalize(trace_pk=trace.pk)
    trace.refresh_from_db()
    spans = {s.name: s for s in Span.objects.filter(trace=trace)}
    assert set(spans) == {"support-run", "chat", "refund_lookup"}
    assert spans["support-run"].kind == "AGENT" and spans["support-run"].node == "support-run"
    chat = spans["chat"]
    assert (chat.kind, chat.model, chat.input_tokens, chat.output_tokens, chat.node) == (
        "LLM", "gpt-4o-mini", 11, 7, "support-run")
    assert chat.parent_span_id == spans["support-run"].span_id
    assert spans["refund_lookup"].kind == "TOOL" and spans["refund_lookup"].status == "error"
    assert trace.release == "r7"
    assert Score.objects.filter(trace=trace, name="outcome").exists()
    assert trace.outcome == "failure"


pytestmark_db = pytest.mark.django_db


def _event(type_: str, body: dict, **extra) -> dict:
    return {"id": str(uuid.uuid4()), "type": type_, "timestamp": "2026-12-01T10:00:00.000Z", "body": body, **extra}


@pytestmark_db
def test_ingestion_batch_answers_207_per_event_and_merges_updates(issued_key, project):
    trace_id = str(uuid.uuid4())
    gen_id = str(uuid.uuid4())
    batch = [
        _event("trace-create", {"id": trace_id, "name": "ticket", "release": "v2", "userId": "u1",
                                "input": {"q": "where is my order"}}),
        _event("agent-create", {"id": "agent-1", "traceId": trace_id, "name": "orders_agent",
                                "startTime": "2026-12-01T10:00:00Z"}),
        _event("generation-create", {"id": gen_id, "traceId": trace_id, "parentObservationId": "agent-1",
                                     "name": "chat", "model": "gpt-4o", "startTime": "2026-12-01T10:00:01Z"}),
        _event("generation-update", {"id": gen_id, "traceId": trace_id, "output": "It ships today",
                                     "usageDetails": {"input": 40, "output": 5}, "endTime": "2026-12-01T10:00:02Z"}),
        _event("tool-create", {"id": "tool-1", "traceId": trace_id, "parentObservationId": "agent-1",
                               "name": "order_lookup", "input": {"id": 7}, "output": {"status": "shipped"},
                               "startTime": "2026-12-01T10:00:01Z"}),
        _event("score-create", {"id": "score-1", "traceId": trace_id, "name": "outcome", "value": 1}),
        _event("sdk-log", {"log": "hello"}),
        _event("nonsense-create", {"id": "x"}),
        {"type": "span-create", "body": {"id": "no-event-id"}},
    ]
    response = Client().post("/api/public/ingestion", data={"batch": batch}, content_type="application/json",
                             HTTP_AUTHORIZATION=_basic(issued_key))
    assert response.status_code == 207
    body = response.json()
    assert len(body["successes"]) == 7 and len(body["errors"]) == 2
    assert all(error["status"] == 400 and error["message"] for error in body["errors"])
    trace = Trace.objects.get(project=project)
    trace_finalize(trace_pk=trace.pk)
    trace.refresh_from_db()
    spans = {s.name: s for s in Span.objects.filter(trace=trace)}
    assert {"ticket", "orders_agent", "chat", "order_lookup"} <= set(spans)
    chat = spans["chat"]
    assert (chat.kind, chat.output, chat.input_tokens, chat.output_tokens, chat.node) == (
        "LLM", "It ships today", 40, 5, "orders_agent")
    assert spans["order_lookup"].kind == "TOOL" and spans["order_lookup"].node == "orders_agent"
    assert (trace.release, trace.user_id, trace.outcome) == ("v2", "u1", "success")

    # A resent batch (SDK retry) duplicates nothing; a later update merges into the stored span.
    Client().post("/api/public/ingestion", data={"batch": batch}, content_type="application/json",
                  HTTP_AUTHORIZATION=_basic(issued_key))
    late = [_event("generation-update", {"id": gen_id, "traceId": trace_id, "metadata": {"checked": True}})]
    Client().post("/api/public/ingestion", data={"batch": late}, content_type="application/json",
                  HTTP_AUTHORIZATION=_basic(issued_key))
    assert Span.objects.filter(trace=trace).count() == len(spans)
    chat.refresh_from_db()
    assert chat.metadata.get("checked") is True and chat.output == "It ships today"
    assert Score.objects.filter(trace=trace).count() == 1


@pytestmark_db
@pytest.mark.parametrize(
    "data, content_type, status, words",
    [
        ("not json", "application/json", 400, "not valid JSON"),
        ('{"events": []}', "application/json", 400, "batch"),
        ('{"batch": []}', "text/plain", 415, "application/json"),
    ],
)
def test_bad_ingestion_requests_get_a_message(issued_key, data, content_type, status, words):
    response = Client().post("/api/public/ingestion", data=data, content_type=content_type,
                             HTTP_AUTHORIZATION=_basic(issued_key))
    assert response.status_code == status
    assert words in response.json()["message"]


@pytestmark_db
def test_ingestion_needs_a_key(project):
    response = Client().post("/api/public/ingestion", data={"batch": []}, content_type="application/json")
    assert response.status_code == 401
    assert "Missing API key" in response.json()["message"]
