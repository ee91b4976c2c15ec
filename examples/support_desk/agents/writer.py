"""Writer: turns the mediator's brief into the reply the customer reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Span

from ..backend import CUSTOMERS
from ..llm import Reply, system_message, user_message
from ..runtime import Process
from .base import Agent
from .mediator import Brief, Finding

WRITER_PROMPT = (
    "You are the writer of a customer support desk. Answer the customer's ticket using only the facts "
    "in the brief. Be warm and concise, mention every order, invoice, refund and article in the brief, "
    "and never expose internal error codes."
)

GREETINGS = ("Hi {first}!", "Hello {first}!", "Thanks for reaching out, {first}.")
CLOSINGS = (
    "Let me know if there's anything else I can help with.",
    "Is there anything else I can do for you?",
    "Happy to help with anything else.",
)
ORDER_STATUS_PHRASES = {
    "processing": "is being processed at our warehouse",
    "shipped": "has shipped",
    "delivered": "was delivered",
    "returned": "was returned to us",
    "cancelled": "was cancelled",
}
REFERENCE_LABELS = {
    "order_lookup": ("order", "order_id"),
    "track_shipment": ("tracking details for order", "order_id"),
    "invoice_lookup": ("invoice", "invoice_id"),
    "billing_account": ("billing details for account", "customer_id"),
    "refund_lookup": ("refund details for order", "order_id"),
    "create_refund": ("refund for", "order_id"),
    "kb_search": ("help articles about", "query"),
    "send_password_reset": ("password reset for", "email"),
}


def money(amount: float) -> str:
    return f"${amount:,.2f}"


def _order(data: dict[str, Any]) -> str:
    status = ORDER_STATUS_PHRASES.get(data["status"], f"is {data['status']}")
    return f"Order {data['order_id']} ({', '.join(data['items'])}, {money(data['total'])}) {status}."


def _shipment(data: dict[str, Any]) -> str:
    order, carrier, tracking = data["order_id"], data["carrier"], data["tracking_number"]
    if data["status"] == "delayed":
        return (f"Your package for order {order} is delayed because of {data['delay_reason']}; {carrier} now "
                f"expects to deliver it by {data['eta']} (tracking number {tracking}).")
    if data["status"] == "delivered":
        return (f"{carrier} shows the package for order {order} as delivered on {data['eta']}, "
                f"{data.get('delivered_note', '')} (tracking number {tracking}).")
    if data["status"] == "out_for_delivery":
        return f"Your package for order {order} is out for delivery with {carrier} today (tracking number {tracking})."
    return (f"Your package for order {order} is in transit with {carrier} (tracking number {tracking}) "
            f"and should arrive by {data['eta']}.")


def _invoice(data: dict[str, Any]) -> str:
    charged = f" We found {len(data['charges'])} charges for it." if len(data.get("charges", [])) > 1 else ""
    return (f"Invoice {data['invoice_id']} (issued {data['issued']}) is {money(data['amount'])} and {data['status']}: "
            f"{'; '.join(data['lines'])}.{charged}")


def _billing_account(data: dict[str, Any]) -> str:
    return (f"Your next charge of {money(data['next_charge_amount'])} for the {data['plan']} plan is scheduled "
            f"for {data['next_charge_date']} on your {data['payment_method']}.")


def _refund_status(data: dict[str, Any]) -> str:
    refund = data["refund"]
    if refund is None:
        # An eligible order gets a create_refund finding of its own; only refusals need words here.
        return "" if data["eligible"] else f"Order {data['order_id']} isn't eligible for a refund ({data['basis']})."
    if refund["status"] == "processed":
        return (f"Refund {refund['refund_id']} of {money(refund['amount'])} for order {data['order_id']} was processed "
                f"on {refund['processed_on']} to your {refund['destination']}.")
    return (f"Refund {refund['refund_id']} of {money(refund['amount'])} for order {data['order_id']} is "
            f"{refund['status']} and should reach your {refund['destination']} by {refund['expected_by']}.")


def _refund_issued(data: dict[str, Any]) -> str:
    refund = data["refund"]
    return (f"I've issued refund {refund['refund_id']} of {money(refund['amount'])} for {data['reference']} "
            f"({refund['reason']}); it will reach your {refund['destination']} in {refund['arrives_in']}.")


def _articles(data: dict[str, Any]) -> str:
    if not data["articles"]:
        return f"I couldn't find a help article about \"{data['query']}\"."
    top = data["articles"][0]
    return f"{top['title']}: {top['summary']} ({top['url']})"


def _password_reset(data: dict[str, Any]) -> str:
    return f"I've sent a password reset link to {data['email']}; it expires in {data['expires_in_minutes']} minutes."


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "order_lookup": _order,
    "track_shipment": _shipment,
    "invoice_lookup": _invoice,
    "billing_account": _billing_account,
    "refund_lookup": _refund_status,
    "create_refund": _refund_issued,
    "kb_search": _articles,
    "send_password_reset": _password_reset,
}


def render_finding(finding: Finding) -> str:
    if finding.ok:
        return RENDERERS[finding.tool](finding.payload)
    label, key = REFERENCE_LABELS[finding.tool]
    reference = finding.arguments.get(key) or next(iter(finding.arguments.values()), "")
    if finding.payload.get("error") == "not_found":
        if finding.tool == "order_lookup":
            return (f"I couldn't find an order with the number {reference} — could you double-check it "
                    "against your confirmation email?")
        return f"I couldn't find the {label} {reference}."
    return f"I couldn't retrieve the {label} {reference} just now — please try again in a few minutes."


class Writer(Agent):
    name = "writer"
    description = "Writes the reply to the customer from the mediator's brief."

    def compose(self, brief: Brief) -> str:
        first_name = CUSTOMERS[self.context.customer_id]["name"].split()[0]
        greeting = self.context.rng.choice(GREETINGS).format(first=first_name)
        body = [sentence for sentence in (render_finding(finding) for finding in brief.findings) if sentence]
        if not body:
            body = ["I'm looking into this and will follow up by email shortly."]
        closing = self.context.rng.choice(CLOSINGS)
        return " ".join([greeting, *body, closing])

    def write(self, ticket: str, brief: Brief, *, parent: Span) -> Process[str]:
        span = self.open_span(parent)
        answer = self.compose(brief)
        yield from self.context.model.chat(
            agent_name=self.name,
            model=self.context.config.models.writer,
            messages=[system_message(WRITER_PROMPT), user_message(ticket), user_message("Brief: " + brief.as_json())],
            reply=Reply(text=answer),
            parent=span,
        )
        self.context.tracing.end(span)
        return answer
