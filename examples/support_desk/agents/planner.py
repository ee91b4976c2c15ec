"""Planner: reads the ticket, extracts what the customer wants, hands each need to a worker."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from ..llm import Reply, system_message, user_message
from ..runtime import Process
from ..telemetry import to_json
from .base import Agent

ORDER_ID = re.compile(r"\bO-\d{4}\b")
INVOICE_ID = re.compile(r"\bINV-\d{4}\b")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+\w")
HOW_TO = re.compile(r"\bhow (?:do|can) i ([^,?.]+)|\bwhat(?:'s| is) your ([^,?.]+)", re.IGNORECASE)

REFUND_CUES = ("refund", "money back", "charged twice")
SHIPPING_CUES = ("package", "tracking", "late", "delayed", "shipment", "where is", "where's", "where are")
BILLING_CUES = ("next charge", "next bill")
PASSWORD_CUES = ("password", "log in", "locked out")

# Which worker owns which kind of need.
ROUTES: dict[str, str] = {
    "order_status": "orders_worker",
    "shipping": "shipping_worker",
    "refund": "billing_worker",
    "invoice": "billing_worker",
    "billing_account": "billing_worker",
    "password_reset": "account_worker",
    "how_to": "kb_worker",
}

PLANNER_PROMPT = (
    "You are the planner of a customer support desk. Read the customer's ticket and list every "
    "distinct request in it. For each, name the worker that should handle it "
    f"({', '.join(sorted(set(ROUTES.values())))}) and the identifiers it needs. "
    'Answer with JSON: {"steps": [{"worker": ..., "intent": ..., ...}]}.'
)


@dataclass(frozen=True)
class Intent:
    kind: str
    order_ids: tuple[str, ...] = ()
    invoice_ids: tuple[str, ...] = ()
    email: str | None = None
    topics: tuple[str, ...] = ()

    def as_step(self, worker: str) -> dict[str, Any]:
        step: dict[str, Any] = {"worker": worker, "intent": self.kind}
        for key in ("order_ids", "invoice_ids", "topics"):
            if getattr(self, key):
                step[key] = list(getattr(self, key))
        if self.email:
            step["email"] = self.email
        return step


@dataclass
class Assignment:
    worker: str
    intents: list[Intent] = field(default_factory=list)

    def instructions(self) -> str:
        steps = [intent.as_step(self.worker) for intent in self.intents]
        return "Handle these requests from the customer's ticket: " + to_json(steps)


def _mentions(text: str, cues: tuple[str, ...]) -> bool:
    return any(cue in text for cue in cues)


def extract_intents(ticket: str) -> list[Intent]:
    """Rule-based reading of the ticket; the order of the returned intents is stable."""
    lowered = ticket.lower()
    order_ids = tuple(dict.fromkeys(ORDER_ID.findall(ticket)))
    invoice_ids = tuple(dict.fromkeys(INVOICE_ID.findall(ticket)))
    intents: list[Intent] = []

    if _mentions(lowered, REFUND_CUES):
        if order_ids:
            intents.append(Intent("refund", order_ids=order_ids))
            order_ids = ()
        elif invoice_ids:
            intents.append(Intent("refund", invoice_ids=invoice_ids))
            invoice_ids = ()
    if order_ids:
        kind = "shipping" if _mentions(lowered, SHIPPING_CUES) else "order_status"
        intents.append(Intent(kind, order_ids=order_ids))
    if invoice_ids:
        intents.append(Intent("invoice", invoice_ids=invoice_ids))
    if _mentions(lowered, BILLING_CUES):
        intents.append(Intent("billing_account"))
    if _mentions(lowered, PASSWORD_CUES):
        email = EMAIL.search(ticket)
        intents.append(Intent("password_reset", email=email.group(0) if email else None))
    topics = tuple(" ".join(part for part in match if part).strip() for match in HOW_TO.findall(ticket))
    if topics:
        intents.append(Intent("how_to", topics=topics))
    return intents


class Planner(Agent):
    name = "planner"
    description = "Splits a support ticket into requests and routes each to a worker."

    def route(self, intent: Intent) -> str:
        worker = ROUTES[intent.kind]
        if self.context.config.bugs.misroute and intent.kind == "refund" and intent.order_ids:
            # A refund for an order is sent to the desk that owns the order records.
            worker = ROUTES["order_status"]
        return worker

    def plan(self, ticket: str, *, parent: Span) -> Process[list[Assignment]]:
        span = self.open_span(parent)
        assignments: dict[str, Assignment] = {}
        for intent in extract_intents(ticket):
            worker = self.route(intent)
            assignments.setdefault(worker, Assignment(worker)).intents.append(intent)
        steps = [intent.as_step(a.worker) for a in assignments.values() for intent in a.intents]
        yield from self.context.model.chat(
            agent_name=self.name,
            model=self.context.config.models.planner,
            messages=[system_message(PLANNER_PROMPT), user_message(ticket)],
            reply=Reply(text=to_json({"steps": steps})),
            parent=span,
        )
        self.context.tracing.end(span)
        return list(assignments.values())
