import gzip

import pytest
from django.test import Client
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from traces.models import Span, Trace
from traces.services import trace_finalize
from tests.traces.otlp_helpers import agent_run_spans, to_json, to_protobuf

pytestmark = pytest.mark.django_db


def _post(key, body: bytes, content_type: str, path: str = "/v1/traces", **headers):
    return Client().post(path, data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key.secret}",
                         **headers)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize("path", ["/v1/traces", "/api/public/otel/v1/traces"])
def test_it_stores_a_trace_with_nodes_kinds_tokens_and_outcome(issued_key, project, encoding, path):
    spans = agent_run_spans()
    body, content_type = (to_protobuf(spans), "application/x-protobuf") if encoding == "protobuf" else (
        to_json(spans), "application/json")
    response = _post(issued_key, body, content_type, path)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith(content_type)
    if encoding == "protobuf":
        decoded = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
        assert not decoded.HasField("partial_success")
    else:
        assert response.json() == {}
    trace = Trace.objects.get(project=project)
    trace_finalize(trace_pk=trace.pk)
    trace.refresh_from_db()
    stored = {s.name: s for s in Span.objects.filter(trace=trace)}
    assert set(stored) == {"handle_ticket", "invoke_agent planner", "chat gpt-4o", "execute_tool refund_lookup"}
    assert stored["invoke_agent planner"].kind == "AGENT" and stored["invoke_agent planner"].node == "planner"
    chat = stored["chat gpt-4o"]
    assert (chat.kind, chat.node, chat.model, chat.input_tokens, chat.output_tokens) == ("LLM", "planner", "gpt-4o",
                                                                                        120, 30)
    assert chat.parent_span_id == stored["invoke_agent planner"].span_id
    tool = stored["execute_tool refund_lookup"]
    assert (tool.kind, tool.node, tool.status) == ("TOOL", "planner", "error")
    assert tool.exceptions and tool.exceptions[0]["type"] == "TimeoutError"
    assert (trace.outcome, trace.score, trace.task_id, trace.release) == ("failure", 0.0, "task-1", "v1")
    assert (trace.span_count, trace.error_count, trace.input_tokens, trace.output_tokens) == (4, 1, 120, 30)
    assert trace.root_span_id == stored["handle_ticket"].span_id


def test_a_retried_batch_duplicates_nothing(issued_key, project):
    body = to_protobuf(agent_run_spans())
    for _ in range(3):
        assert _post(issued_key, body, "application/x-protobuf").status_code == 200
    assert Trace.objects.filter(project=project).count() == 1
    assert Span.objects.filter(project=project).count() == 4


def test_gzip_bodies_are_accepted(issued_key, project):
    response = _post(issued_key, gzip.compress(to_json(agent_run_spans())), "application/json",
                     HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.content
    assert Span.objects.filter(project=project).count() == 4


def test_children_stored_before_their_agent_get_its_node_on_finalisation(issued_key, project):
    spans = agent_run_spans()
    agent = next(s for s in spans if s.name == "invoke_agent planner")
    children = [s for s in spans if s.parent and s.parent.span_id == agent.context.span_id]
    rest = [s for s in spans if s not in children]
    # BatchSpanProcessor exports children first: they end before their parent.
    assert _post(issued_key, to_protobuf(children), "application/x-protobuf").status_code == 200
    assert _post(issued_key, to_protobuf(rest), "application/x-protobuf").status_code == 200
    trace = Trace.objects.get(project=project)
    trace_finalize(trace_pk=trace.pk)
    nodes = dict(Span.objects.filter(trace=trace).values_list("name", "node"))
    assert nodes["execute_tool refund_lookup"] == "planner"
    assert nodes["chat gpt-4o"] == "planner"


def test_keys_of_one_project_never_write_into_another(issued_key, project, outsider_project):
    _post(issued_key, to_protobuf(agent_run_spans()), "application/x-protobuf")
    assert Trace.objects.filter(project=outsider_project).count() == 0


def test_missing_key_gets_401_in_the_request_format(project):
    response = Client().post("/v1/traces", data=to_json(agent_run_spans()), content_type="application/json")
    assert response.status_code == 401
    assert "Missing API key" in response.json()["message"]
    response = Client().post("/v1/traces", data=to_protobuf(agent_run_spans()),
                             content_type="application/x-protobuf", HTTP_AUTHORIZATION="Bearer wrong")
    assert response.status_code == 401
    from google.rpc import status_pb2

    assert "not valid" in status_pb2.Status.FromString(response.content).message
    assert Span.objects.count() == 0
