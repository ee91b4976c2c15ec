"""Tool workers: each owns a few tools and runs a short tool-calling loop for its requests.

A worker's policy decides the next batch of tool calls from what it has seen so far; the
calls of one batch run concurrently, like parallel function calls from a chat model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span

from ..backend import CUSTOMERS
from ..llm import Message, Reply, assistant_message, system_message, tool_message, user_message
from ..runtime import Gather, Process, Sleep
from ..tools import ToolCall, ToolResult
from .base import Agent, DeskContext
from .planner import Assignment

MAX_STEPS = 4
MAX_ATTEMPTS = 5

PlannedCall = tuple[str, dict[str, Any]]


class ToolRetriesExhaustedError(Exception):
    """A tool kept refusing the request until the worker stopped asking."""


@dataclass(frozen=True)
class WorkerReport:
    worker: str
    results: tuple[ToolResult, ...]


class ToolWorker(Agent):
    tools: tuple[str, ...] = ()

    @property
    def system_prompt(self) -> str:
        return (
            f"You are the {self.name} of a customer support desk. Use your tools ({', '.join(self.tools)}) "
            "to gather the facts needed for the requests you are given, then summarise what you found."
        )

    def next_calls(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        """The scripted policy. An empty list means the worker has what it needs."""
        raise NotImplementedError

    def run(self, assignment: Assignment, *, parent: Span) -> Process[WorkerReport]:
        context = self.context
        span = self.open_span(parent)
        messages: list[Message] = [system_message(self.system_prompt), user_message(assignment.instructions())]
        history: list[ToolResult] = []
        for _ in range(MAX_STEPS):
            planned = self.next_calls(assignment, history)
            if not planned:
                break
            calls = tuple(ToolCall(context.call_ids.next(), name, arguments) for name, arguments in planned)
            yield from self._chat(messages, Reply(tool_calls=calls), span)
            messages.append(assistant_message(tool_calls=calls))
            results: list[ToolResult] = yield Gather([self._call_with_retries(call, span) for call in calls])
            history.extend(results)
            messages.extend(tool_message(result) for result in results)
        yield from self._chat(messages, Reply(text=summarize(history)), span)

        exhausted = [result for result in history if result.error and result.error.get("error") == "rate_limited"]
        if exhausted:
            names = ", ".join(sorted({result.call.name for result in exhausted}))
            context.tracing.record_error(
                span, ToolRetriesExhaustedError(f"{names} still rate limited after {MAX_ATTEMPTS} attempts")
            )
        context.tracing.end(span)
        return WorkerReport(self.name, tuple(history))

    def _chat(self, messages: list[Message], reply: Reply, span: Span) -> Process[Reply]:
        model = self.context.config.models.worker
        return self.context.model.chat(
            agent_name=self.name, model=model, messages=list(messages), reply=reply, parent=span
        )

    def _call_with_retries(self, call: ToolCall, span: Span) -> Process[ToolResult]:
        attempt = 1
        while True:
            result = yield from self.context.tools.execute(call, agent_name=self.name, parent=span, attempt=attempt)
            rate_limited = result.error is not None and result.error.get("error") == "rate_limited"
            if not rate_limited or attempt >= MAX_ATTEMPTS:
                return result
            attempt += 1
            if self.context.config.bugs.retry_loop:
                continue
            # Come back when the service said it would accept the request again.
            yield Sleep(int(result.error.get("retry_after", 1)) * 1_000)


def summarize(history: Sequence[ToolResult]) -> str:
    if not history:
        return "No lookups were needed."
    lines = []
    for result in history:
        arguments = ", ".join(f"{key}={value}" for key, value in result.call.arguments.items())
        outcome = "ok" if result.ok else f"failed ({result.payload.get('error')})"
        lines.append(f"{result.call.name}({arguments}): {outcome}")
    return "Findings: " + "; ".join(lines) + "."


def _ids(assignment: Assignment, attribute: str, *kinds: str) -> list[str]:
    """The identifiers of one sort (`order_ids`, `topics`, ...) across the assignment's intents."""
    intents = [intent for intent in assignment.intents if not kinds or intent.kind in kinds]
    return [value for intent in intents for value in getattr(intent, attribute)]


class OrdersWorker(ToolWorker):
    name = "orders_worker"
    description = "Answers questions about orders: status, items, totals."
    tools = ("order_lookup",)

    def next_calls(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        if history:
            return []
        return [("order_lookup", {"order_id": order_id}) for order_id in _ids(assignment, "order_ids")]


class ShippingWorker(ToolWorker):
    name = "shipping_worker"
    description = "Tracks shipments and explains delays."
    tools = ("track_shipment",)

    def next_calls(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        if history:
            return []
        return [("track_shipment", {"order_id": order_id}) for order_id in _ids(assignment, "order_ids")]


class BillingWorker(ToolWorker):
    name = "billing_worker"
    description = "Handles invoices, upcoming charges and refunds."
    tools = ("invoice_lookup", "billing_account", "refund_lookup", "create_refund")

    def next_calls(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        if not history:
            calls: list[PlannedCall] = []
            for intent in assignment.intents:
                if intent.kind == "refund":
                    calls += [("refund_lookup", {"order_id": order_id}) for order_id in intent.order_ids]
                calls += [("invoice_lookup", {"invoice_id": invoice_id}) for invoice_id in intent.invoice_ids]
                if intent.kind == "billing_account":
                    calls.append(("billing_account", {"customer_id": self.context.customer_id}))
            return calls
        if any(result.call.name == "create_refund" for result in history):
            return []
        return self._refunds_to_issue(assignment, history)

    def _refunds_to_issue(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        refund_invoices = set(_ids(assignment, "invoice_ids", "refund"))
        calls: list[PlannedCall] = []
        for result in history:
            if not result.ok or result.data is None:
                continue
            data = result.data
            if result.call.name == "refund_lookup" and data["refund"] is None and data["eligible"]:
                calls.append(("create_refund", {"order_id": data["order_id"], "reason": data["basis"]}))
            if result.call.name == "invoice_lookup" and data["invoice_id"] in refund_invoices:
                if len(data.get("charges", [])) > 1:
                    calls.append(("create_refund", {"invoice_id": data["invoice_id"], "reason": "duplicate charge"}))
        return calls


class AccountWorker(ToolWorker):
    name = "account_worker"
    description = "Handles sign-in problems and account security."
    tools = ("send_password_reset",)

    def next_calls(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        if history:
            return []
        fallback = CUSTOMERS[self.context.customer_id]["email"]
        return [
            ("send_password_reset", {"email": intent.email or fallback})
            for intent in assignment.intents
            if intent.kind == "password_reset"
        ]


class KnowledgeBaseWorker(ToolWorker):
    name = "kb_worker"
    description = "Finds help-center articles for how-to and policy questions."
    tools = ("kb_search",)

    def next_calls(self, assignment: Assignment, history: Sequence[ToolResult]) -> list[PlannedCall]:
        if history:
            return []
        return [("kb_search", {"query": topic}) for topic in _ids(assignment, "topics")]


WORKERS: dict[str, type[ToolWorker]] = {
    worker.name: worker for worker in (OrdersWorker, ShippingWorker, BillingWorker, AccountWorker, KnowledgeBaseWorker)
}


def build_worker(name: str, context: DeskContext) -> ToolWorker:
    return WORKERS[name](context)
