"""Tool calls as the agents see them, and their execution as `execute_tool` spans."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span, SpanKind

from .backend import Backend, RateLimitedError, ServiceError
from .runtime import Process, Scheduler, Sleep
from .telemetry import Tracing, to_json

TOOL_DESCRIPTIONS: dict[str, str] = {
    "order_lookup": "Look up an order by id: status, items, total.",
    "track_shipment": "Carrier tracking for an order: carrier, tracking number, status, ETA.",
    "invoice_lookup": "Fetch an invoice by id: amount, status, line items.",
    "billing_account": "The customer's plan, next charge and payment method.",
    "refund_lookup": "Existing refund for an order, or whether the order is eligible for one.",
    "create_refund": "Issue a refund for an order or a duplicated invoice charge.",
    "kb_search": "Search the help-center knowledge base.",
    "send_password_reset": "Email a password reset link to an account.",
}


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: Mapping[str, Any]

    def as_message_part(self) -> dict[str, Any]:
        return {"type": "tool_call", "id": self.call_id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    data: dict[str, Any] | None
    error: dict[str, Any] | None
    finished_at_ns: int
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def payload(self) -> dict[str, Any]:
        return self.data if self.data is not None else (self.error or {})

    def as_message_part(self) -> dict[str, Any]:
        return {"type": "tool_call_response", "id": self.call.call_id, "response": self.payload}


@dataclass
class ToolCallIds:
    """Provider-style call ids (`call_…`), drawn from the run's RNG so they replay."""

    rng: random.Random
    issued: list[str] = field(default_factory=list)

    def next(self) -> str:
        call_id = f"call_{self.rng.getrandbits(64):016x}"
        self.issued.append(call_id)
        return call_id


class ToolRunner:
    """Executes calls against the backend for one ticket, one `execute_tool` span per attempt."""

    def __init__(self, *, backend: Backend, tracing: Tracing, clock: Scheduler, customer_id: str) -> None:
        self._backend = backend
        self._tracing = tracing
        self._clock = clock
        self._customer_id = customer_id

    def execute(self, call: ToolCall, *, agent_name: str, parent: Span, attempt: int = 1) -> Process[ToolResult]:
        span = self._tracing.start(
            f"execute_tool {call.name}",
            parent=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.agent.name": agent_name,
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.description": TOOL_DESCRIPTIONS[call.name],
                "gen_ai.tool.call.id": call.call_id,
                "gen_ai.tool.call.arguments": to_json(dict(call.arguments)),
            },
        )
        timing = self._backend.timings[call.name]
        try:
            data = self._backend.call(
                call.name, dict(call.arguments), customer_id=self._customer_id, now_ns=self._clock.now_ns
            )
        except ServiceError as error:
            # Rejections come back from the gateway, before any real work is done.
            yield Sleep(timing.rejected_ms if isinstance(error, RateLimitedError) else timing.ok_ms)
            span.set_attribute("gen_ai.tool.call.result", to_json(error.payload))
            self._tracing.record_error(span, error, error_type=error.code)
            self._tracing.end(span)
            return ToolResult(call, None, error.payload, self._clock.now_ns, attempts=attempt)
        yield Sleep(timing.ok_ms)
        span.set_attribute("gen_ai.tool.call.result", to_json(data))
        self._tracing.end(span)
        return ToolResult(call, data, None, self._clock.now_ns, attempts=attempt)
