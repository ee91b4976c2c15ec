"""Realistic agent traces as OTLP protobuf, built with opentelemetry-proto messages directly (no SDK: fast).

A trace is one request handled by a multi-agent support bot: a root span, agent turns (`invoke_agent`), LLM calls
(`chat <model>`) with GenAI usage and input/output messages, and tool calls (`execute_tool`) with arguments and
results, some of which fail with an exception event. 20-50 spans per trace. Spans are emitted in the order an OTel
BatchSpanProcessor exports them (when they end: children before their parents), and a batch holds whichever spans
ended next, so traces straddle batches the way they do in production.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

_WORDS = (
    "the order refund customer shipping account invoice payment card delayed package warehouse tracking number "
    "policy return window days receipt support ticket escalate agent please confirm address email subscription "
    "plan upgrade downgrade billing cycle charge twice duplicate credit issued balance statement store item damaged "
    "replacement exchange size colour available stock restock notify when back checkout coupon discount expired"
).split()
_AGENTS = ("triage", "planner", "billing_agent", "shipping_agent", "refund_agent", "researcher")
_TOOLS = ("lookup_order", "search_kb", "issue_refund", "track_package", "get_customer", "send_email", "create_ticket")
_MODELS = ("gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "llama-3.1-70b")
RESOURCE = {"service.name": "support-agent", "service.version": "v1.4.2", "deployment.environment": "production"}
SCOPE = "clear.bench"


def _kv(key: str, value) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


class TraceFactory:
    def __init__(self, seed: int = 1, start_ns: int = 1_760_000_000 * 10**9):
        self.rng = random.Random(seed)
        self.clock = start_ns

    def _text(self, low: int, high: int) -> str:
        words = self.rng.choices(_WORDS, k=self.rng.randint(low, high))
        return " ".join(words).capitalize() + "."

    def _id(self, n: int) -> bytes:
        return self.rng.getrandbits(8 * n).to_bytes(n, "big") or b"\x01" * n

    def _span(self, trace_id: bytes, parent: bytes | None, name: str, start: int, end: int, attrs: dict,
              error: str | None = None) -> Span:
        span = Span(trace_id=trace_id, span_id=self._id(8), name=name, kind=Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=start, end_time_unix_nano=end)
        if parent:
            span.parent_span_id = parent
        span.attributes.extend(_kv(k, v) for k, v in attrs.items())
        if error:
            span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=error))
            event = span.events.add(name="exception", time_unix_nano=end)
            event.attributes.extend([_kv("exception.type", "TimeoutError"), _kv("exception.message", error),
                                     _kv("exception.stacktrace", "Traceback (most recent call last):\n  ...\n"
                                         f"TimeoutError: {error}")])
        else:
            span.status.code = Status.STATUS_CODE_OK
        return span

    def trace(self) -> list[Span]:
        """One trace's spans in export order (post-order: a span after all its children)."""
        rng = self.rng
        trace_id = self._id(16)
        budget = rng.randint(20, 50)
        out: list[Span] = []
        t = self.clock
        self.clock += rng.randint(1, 50) * 10**6
        root_id = self._id(8)
        root_start = t
        turns = []
        # agent turns of (1 agent span + 1-3 LLM calls + 0-3 tools) until the budget is spent
        while budget > 1:
            agent = rng.choice(_AGENTS)
            agent_id = self._id(8)
            agent_start = t
            children = []
            for _ in range(rng.randint(1, 3)):
                if budget <= 2:
                    break
                model = rng.choice(_MODELS)
                start, t = t, t + rng.randint(200, 3000) * 10**6
                messages = [{"role": "system", "content": self._text(15, 30)},
                            {"role": "user", "content": self._text(20, 50)}]
                reply = [{"role": "assistant", "content": self._text(20, 60)}]
                children.append(self._span(trace_id, agent_id, f"chat {model}", start, t, {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": model,
                    "gen_ai.response.model": model,
                    "gen_ai.request.temperature": 0.2,
                    "gen_ai.usage.input_tokens": rng.randint(200, 4000),
                    "gen_ai.usage.output_tokens": rng.randint(20, 800),
                    "gen_ai.input.messages": json.dumps(messages),
                    "gen_ai.output.messages": json.dumps(reply),
                }))
                budget -= 1
                for _ in range(rng.randint(0, 2)):
                    if budget <= 2:
                        break
                    tool = rng.choice(_TOOLS)
                    start, t = t, t + rng.randint(5, 800) * 10**6
                    error = "upstream timed out after 30s" if rng.random() < 0.05 else None
                    children.append(self._span(trace_id, agent_id, f"execute_tool {tool}", start, t, {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.id": "call_" + self._id(6).hex(),
                        "gen_ai.tool.call.arguments": json.dumps({"query": self._text(5, 15),
                                                                  "order_id": rng.randint(1000, 99999)}),
                        "gen_ai.tool.call.result": json.dumps({"result": self._text(20, 60)}),
                    }, error=error))
                    budget -= 1
            if not children:
                break
            agent_span = self._span(trace_id, root_id, f"invoke_agent {agent}", agent_start, t, {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.input.messages": json.dumps([{"role": "user", "content": self._text(10, 30)}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": self._text(10, 40)}]),
            })
            budget -= 1
            turns.append(children + [agent_span])
        for turn in turns:
            out.extend(turn)
        outcome = "success" if rng.random() < 0.8 else "failure"
        root = Span(trace_id=trace_id, span_id=root_id, name="handle_ticket", kind=Span.SPAN_KIND_SERVER,
                    start_time_unix_nano=root_start, end_time_unix_nano=t + 10**6)
        root.attributes.extend([
            _kv("clear.task.id", f"ticket-{rng.randint(1, 10**6)}"),
            _kv("clear.outcome", outcome),
            _kv("clear.score", 1.0 if outcome == "success" else 0.0),
            _kv("session.id", f"sess-{rng.randint(1, 5000)}"),
            _kv("user.id", f"user-{rng.randint(1, 20000)}"),
            _kv("input.value", self._text(20, 60)),
            _kv("output.value", self._text(20, 60)),
        ])
        root.status.code = Status.STATUS_CODE_OK
        out.append(root)
        return out


def batches(*, total: int, batch_size: int, seed: int = 1) -> Iterator[tuple[bytes, list[tuple[str, str]]]]:
    """(serialised ExportTraceServiceRequest, [(trace id hex, span id hex)]) for `total` spans in batches."""
    factory = TraceFactory(seed=seed)
    pending: list[Span] = []
    sent = 0
    while sent < total:
        while len(pending) < batch_size and sent + len(pending) < total:
            pending.extend(factory.trace())
        take = min(batch_size, total - sent)
        chunk, pending = pending[:take], pending[take:]
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(_kv(k, v) for k, v in RESOURCE.items())
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = SCOPE
        scope_spans.scope.version = "1.0"
        scope_spans.spans.extend(chunk)
        sent += take
        yield request.SerializeToString(), [(s.trace_id.hex(), s.span_id.hex()) for s in chunk]
