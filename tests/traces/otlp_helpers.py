"""Build OTLP requests with the real opentelemetry-sdk."""

import base64
import json

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode


def agent_run_spans(*, release: str = "v1", outcome: str = "failure", task_id: str = "task-1"):
    """A small agent run: root workflow → planner agent (chat) → a tool that fails."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "demo-agent", "service.version": release}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("handle_ticket") as root:
        root.set_attribute("clear.task.id", task_id)
        with tracer.start_as_current_span("invoke_agent planner") as agent:
            agent.set_attribute("gen_ai.operation.name", "invoke_agent")
            agent.set_attribute("gen_ai.agent.name", "planner")
            with tracer.start_as_current_span("chat gpt-4o") as chat:
                chat.set_attribute("gen_ai.operation.name", "chat")
                chat.set_attribute("gen_ai.request.model", "gpt-4o")
                chat.set_attribute("gen_ai.usage.input_tokens", 120)
                chat.set_attribute("gen_ai.usage.output_tokens", 30)
                chat.set_attribute("gen_ai.input.messages", json.dumps([{"role": "user", "content": "refund?"}]))
                chat.set_attribute("gen_ai.output.messages", json.dumps([{"role": "assistant", "content": "ok"}]))
            with tracer.start_as_current_span("execute_tool refund_lookup") as tool:
                tool.set_attribute("gen_ai.operation.name", "execute_tool")
                tool.set_attribute("gen_ai.tool.name", "refund_lookup")
                tool.set_attribute("gen_ai.tool.call.arguments", '{"order": 42}')
                try:
                    raise TimeoutError("upstream timed out")
                except TimeoutError as exc:
                    tool.record_exception(exc)
                    tool.set_status(Status(StatusCode.ERROR, "upstream timed out"))
        root.set_attribute("clear.outcome", outcome)
        root.set_attribute("clear.score", 0.0 if outcome == "failure" else 1.0)
    provider.shutdown()
    return exporter.get_finished_spans()


def to_protobuf(spans) -> bytes:
    return encode_spans(spans).SerializeToString()


def _hex_ids(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str) and value:
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


def to_json(spans) -> bytes:
    """OTLP/JSON as the spec encodes it: hex ids (protobuf's JSON mapping would give base64)."""
    return json.dumps(_hex_ids(MessageToDict(encode_spans(spans)))).encode()
