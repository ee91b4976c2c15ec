"""Protobuf decoding: real opentelemetry-sdk exports decode identically to their JSON forms."""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from traces.normalize import decode_export_request, resolve_nodes

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("CLEAR_SHARED_DIR", str(REPO_ROOT.parent / "shared"))).resolve()


def _sdk_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent", "service.version": "1.4.2",
                                                        "deployment.environment.name": "staging"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("clear.tests", "0.1")
    with tracer.start_as_current_span("invoke_agent planner", kind=trace_api.SpanKind.INTERNAL) as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "planner")
        agent.set_attribute("session.id", "s-1")
        agent.set_attribute("clear.outcome", "success")
        agent.set_attribute("clear.score", 0.75)
        agent.set_attribute("clear.task.id", "task-42")
        with tracer.start_as_current_span("chat gpt-4o", kind=trace_api.SpanKind.CLIENT) as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.request.model", "gpt-4o")
            llm.set_attribute("gen_ai.request.temperature", 0.2)
            llm.set_attribute("gen_ai.request.stop_sequences", ["\n\n", "END"])
            llm.set_attribute("gen_ai.request.stream", False)
            llm.set_attribute("gen_ai.usage.input_tokens", 812)
            llm.set_attribute("gen_ai.usage.output_tokens", 40)
            llm.set_attribute("gen_ai.usage.cache_read.input_tokens", 512)
            llm.set_attribute("gen_ai.usage.cost", 0.0031)
            llm.set_attribute("weird.double", float("nan"))
            llm.set_attribute("big.int", 2**62)
            llm.set_attribute(
                "gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
            )
            llm.set_attribute("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": []}]))
            llm.add_event("gen_ai.choice", {"index": 0, "finish_reason": "stop"})
        with tracer.start_as_current_span("execute_tool search") as tool:
            tool.set_attribute("gen_ai.tool.name", "search")
            tool.set_attribute("gen_ai.tool.call.arguments", '{"q": "refund policy"}')
            tool.add_link(agent.get_span_context(), {"link.kind": "caller"})
            try:
                raise TimeoutError("search backend timed out")
            except TimeoutError as exc:
                tool.record_exception(exc)
                tool.set_status(trace_api.Status(trace_api.StatusCode.ERROR))
    provider.shutdown()
    return exporter.get_finished_spans()


def _otlp_json(pb: ExportTraceServiceRequest) -> dict:
    """The spec's OTLP/JSON: hex ids, integer enums, int64 as strings."""
    doc = json_format.MessageToDict(pb, use_integers_for_enums=True)

    def fix(obj):
        if isinstance(obj, dict):
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in obj and obj[key]:
                    obj[key] = base64.b64decode(obj[key]).hex().upper()  # upper case on purpose (spec example)
            for v in obj.values():
                fix(v)
        elif isinstance(obj, list):
            for v in obj:
                fix(v)

    fix(doc)
    return doc


def _comparable(spans):
    return sorted(spans, key=lambda s: s.span_id)


def test_sdk_export_protobuf_equals_json_forms():
    spans = _sdk_spans()
    pb = encode_spans(spans)
    body = pb.SerializeToString()
    from_pb = decode_export_request(body=body, content_type="application/x-protobuf")
    assert from_pb.rejected == [] and len(from_pb.spans) == 3

    hex_json = json.dumps(_otlp_json(pb)).encode()
    from_json = decode_export_request(body=hex_json, content_type="application/json")
    # protobuf-JSON as some SDKs send it: base64 ids and enum names instead of integers
    pbjson = json.dumps(json_format.MessageToDict(pb)).encode()
    assert b"STATUS_CODE_ERROR" in pbjson and b"SPAN_KIND_CLIENT" in pbjson
    from_pbjson = decode_export_request(body=pbjson, content_type="application/json")

    for other in (from_json, from_pbjson):
        assert other.rejected == []
        assert _comparable(other.spans) == _comparable(from_pb.spans)

    resolve_nodes(from_pb.spans)
    by_name = {s.name: s for s in from_pb.spans}
    agent, llm, tool = by_name["invoke_agent planner"], by_name["chat gpt-4o"], by_name["execute_tool search"]
    assert (agent.kind, agent.node, agent.is_root) == ("AGENT", "planner", True)
    assert (agent.outcome, agent.score, agent.task_id, agent.session_id) == ("success", 0.75, "task-42", "s-1")
    assert (llm.kind, llm.node, llm.model, llm.parent_span_id) == ("LLM", "planner", "gpt-4o", agent.span_id)
    assert (llm.input_tokens, llm.output_tokens, llm.cached_tokens, llm.cost) == (812, 40, 512, 0.0031)
    assert llm.input == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    assert llm.attributes["weird.double"] == "NaN"
    assert llm.attributes["big.int"] == 2**62
    assert llm.attributes["gen_ai.request.stop_sequences"] == ["\n\n", "END"]
    assert llm.metadata["model_parameters"]["temperature"] == 0.2
    assert (llm.release, llm.environment) == ("1.4.2", "staging")
    assert llm.scope == "clear.tests"
    assert (tool.kind, tool.node, tool.tool_name, tool.status) == ("TOOL", "planner", "search", "error")
    assert tool.input == {"q": "refund policy"}
    assert tool.exceptions[0]["type"] == "TimeoutError"
    assert tool.exceptions[0]["message"] == "search backend timed out"
    assert "Traceback" in tool.exceptions[0]["stacktrace"]
    assert tool.status_message == "TimeoutError: search backend timed out"
    assert tool.metadata["links"][0]["span_id"] == agent.span_id
    assert agent.usage_is_aggregate is False and llm.usage_is_aggregate is False
    json.dumps([s.attributes for s in from_pb.spans]), json.dumps([s.events for s in from_pb.spans])


def _to_protobuf(doc: dict) -> bytes:
    """OTLP/JSON -> protobuf the safe way: rewrite hex ids to base64 before json_format.Parse."""
    doc = copy.deepcopy(doc)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(key):
                        sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
    return json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()).SerializeToString()


def test_whowhen_json_and_protobuf_decode_identically():
    files = sorted((SHARED / "datasets" / "whowhen-algorithm-generated").glob("Algorithm-Generated-*.json"))
    if not files:
        pytest.fail("shared datasets missing; lay shared/ next to the checkout or set CLEAR_SHARED_DIR")
    for path in files[:20]:
        raw = path.read_bytes()
        from_json = decode_export_request(body=raw, content_type="application/json")
        from_pb = decode_export_request(body=_to_protobuf(json.loads(raw)), content_type="application/x-protobuf")
        assert from_pb.spans == from_json.spans, path.name


def test_json_format_pitfall_is_caught():
    """Feeding OTLP/JSON hex ids straight into json_format.Parse makes 24-byte ids: such spans are rejected."""
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174", "name": "x"}]}]}]}
    body = json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()).SerializeToString()
    batch = decode_export_request(body=body, content_type="application/x-protobuf")
    assert batch.spans == []
    assert [(r.index, r.message) for r in batch.rejected] == [(0, "span 0 ('x'): traceId has 24 bytes, expected 16")]
