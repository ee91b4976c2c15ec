"""The company's back-office systems, simulated: customers, orders, shipments, billing, KB.

Every endpoint answers from the static records below. Latency comes from a per-run
profile drawn from the seeded RNG, so timings vary between seeds but replay exactly.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .runtime import NS_PER_MS, TICK_MS

CUSTOMERS: dict[str, dict[str, Any]] = {
    "C-1001": {"name": "Alice Moreau", "email": "alice@example.com"},
    "C-1002": {"name": "Ben Okafor", "email": "ben@example.com"},
    "C-1003": {"name": "Chen Wei", "email": "chen@example.com"},
    "C-1004": {"name": "Dana Levi", "email": "dana@example.com"},
    "C-1005": {"name": "Emil Novak", "email": "emil@example.com"},
    "C-1006": {"name": "Fatima Khan", "email": "fatima@example.com"},
}

def _order(customer_id: str, status: str, placed_at: str, item: str, total: float) -> dict[str, Any]:
    return {"customer_id": customer_id, "status": status, "placed_at": placed_at, "items": [item], "total": total}


ORDERS: dict[str, dict[str, Any]] = {
    "O-5001": _order("C-1001", "shipped", "2025-01-02", "Trail running shoes", 120.00),
    "O-5003": _order("C-1002", "shipped", "2024-12-30", "Standing desk", 349.00),
    "O-5004": _order("C-1003", "shipped", "2025-01-03", "Noise-cancelling headphones", 199.00),
    "O-5006": _order("C-1004", "delivered", "2024-12-20", "Blender", 89.00),
    "O-5007": _order("C-1005", "returned", "2024-12-10", "Wool coat", 145.00),
    "O-5008": _order("C-1006", "cancelled", "2025-01-04", "Espresso machine", 259.00),
    "O-5009": _order("C-1001", "delivered", "2024-12-15", "Desk lamp", 51.99),
    "O-5010": _order("C-1002", "processing", "2025-01-05", "Yoga mat", 35.00),
    "O-5011": _order("C-1002", "shipped", "2025-01-01", "Water bottle", 18.00),
    "O-5012": _order("C-1003", "shipped", "2025-01-02", "Backpack", 79.00),
    "O-5013": _order("C-1003", "delivered", "2024-12-28", "Rain jacket", 110.00),
    "O-5014": _order("C-1005", "delivered", "2024-12-22", "Cast iron pan", 45.00),
    "O-5015": _order("C-1005", "processing", "2025-01-05", "Chef's knife", 65.00),
    "O-5016": _order("C-1006", "shipped", "2025-01-03", "Bookshelf", 189.00),
}


def _shipment(carrier: str, tracking_number: str, status: str, eta: str, **extra: str) -> dict[str, Any]:
    return {"carrier": carrier, "tracking_number": tracking_number, "status": status, "eta": eta, **extra}


SHIPMENTS: dict[str, dict[str, Any]] = {
    "O-5001": _shipment("UPS", "1Z999AA10123456784", "in_transit", "2025-01-09"),
    "O-5003": _shipment(
        "FedEx", "771234567890", "delayed", "2025-01-14", delay_reason="severe weather at the Memphis hub"
    ),
    "O-5004": _shipment("USPS", "9400111899223344556677", "in_transit", "2025-01-10"),
    "O-5011": _shipment("UPS", "1Z999AA10123456799", "in_transit", "2025-01-08"),
    "O-5012": _shipment("DHL", "JD014600006281234567", "in_transit", "2025-01-11"),
    "O-5013": _shipment(
        "DHL", "JD014600006281234568", "delivered", "2025-01-05", delivered_note="left at the front door"
    ),
    "O-5016": _shipment("UPS", "1Z999AA10123456790", "out_for_delivery", "2025-01-07"),
}


def _invoice(customer_id: str, amount: float, status: str, issued: str, *lines: str, **extra: Any) -> dict[str, Any]:
    invoice = {"customer_id": customer_id, "amount": amount, "status": status, "issued": issued, "lines": list(lines)}
    return {**invoice, **extra}


INVOICES: dict[str, dict[str, Any]] = {
    "INV-9003": _invoice("C-1001", 41.50, "paid", "2025-01-12",
                         "Pro plan (Jan 12-31, prorated upgrade from Basic)", "Basic plan credit"),
    "INV-9005": _invoice("C-1002", 9.00, "paid", "2025-01-01", "Basic plan", charges=["ch_3QbA71", "ch_3QbA72"]),
    "INV-9010": _invoice("C-1003", 58.00, "paid", "2025-01-01", "Pro plan", "2 extra seats"),
    "INV-9011": _invoice("C-1003", 29.00, "paid", "2024-12-01", "Pro plan"),
    "INV-9012": _invoice("C-1004", 29.00, "paid", "2025-01-01", "Pro plan (January)"),
    "INV-9013": _invoice("C-1004", 15.00, "paid", "2025-01-03", "One-time data export add-on"),
    "INV-9014": _invoice("C-1006", 29.00, "paid", "2025-01-01", "Pro plan"),
    "INV-9015": _invoice("C-1005", 29.00, "paid", "2024-12-03", "Pro plan"),
    "INV-9016": _invoice("C-1005", 34.00, "open", "2025-01-03", "Pro plan", "1 extra seat (from Jan 20, prorated)"),
}


def _account(plan: str, next_charge_date: str, next_charge_amount: float, payment_method: str) -> dict[str, Any]:
    return {"plan": plan, "next_charge_date": next_charge_date, "next_charge_amount": next_charge_amount,
            "payment_method": payment_method}


BILLING_ACCOUNTS: dict[str, dict[str, Any]] = {
    "C-1001": _account("Pro", "2025-02-01", 29.00, "Visa ending 4242"),
    "C-1002": _account("Basic", "2025-02-01", 9.00, "Mastercard ending 5100"),
    "C-1003": _account("Pro", "2025-02-01", 58.00, "Visa ending 1881"),
    "C-1004": _account("Pro", "2025-02-01", 29.00, "Amex ending 0005"),
    "C-1005": _account("Pro", "2025-02-03", 39.00, "Visa ending 7310"),
    "C-1006": _account("Pro", "2025-02-01", 29.00, "Visa ending 6602"),
}

REFUNDS: dict[str, dict[str, Any]] = {
    "O-5007": {"refund_id": "RF-6990", "status": "processed", "amount": 145.00, "processed_on": "2025-01-10",
               "destination": "original payment method"},
    "O-5008": {"refund_id": "RF-6995", "status": "pending", "amount": 259.00, "expected_by": "2025-01-09",
               "destination": "original payment method"},
}

# Orders with no refund yet that policy allows refunding, and how much of them.
REFUND_ELIGIBILITY: dict[str, dict[str, Any]] = {
    "O-5006": {"amount": 89.00, "basis": "item arrived damaged"},
    "O-5009": {"amount": 12.99, "basis": "shipping fee refunded for late delivery"},
}


def _article(article_id: str, title: str, keywords: str, summary: str) -> dict[str, Any]:
    return {"id": article_id, "title": title, "keywords": keywords.split(), "summary": summary,
            "url": f"https://help.example.com/kb/{article_id.removeprefix('KB-')}"}


KB_ARTICLES: list[dict[str, Any]] = [
    _article("KB-101", "Reset your password", "password reset forgot login log",
             "Use 'Forgot password' on the sign-in page; the reset link is valid for 30 minutes."),
    _article("KB-204", "Change the email address on your account", "change email address",
             "Go to Settings > Profile > Email, enter the new address and confirm it from the link we send."),
    _article("KB-305", "Delete your account", "delete close account remove",
             "Go to Settings > Privacy > Delete account; deletion becomes permanent after 14 days."),
    _article("KB-410", "Returns and refunds policy", "return returns refund policy",
             "Items can be returned within 30 days of delivery for a full refund to the original payment method."),
    _article("KB-512", "Shipping times", "shipping international delivery times",
             "Domestic orders arrive in 3-5 business days, international orders in 7-14."),
    _article("KB-618", "Update your payment method", "credit card payment update method",
             "Open Billing > Payment methods, add the new card and mark it as default."),
]


class ServiceError(Exception):
    """An error answer from a backend endpoint; `payload` is what the API returns."""

    code = "error"

    def __init__(self, summary: str, **details: Any) -> None:
        super().__init__(summary)
        self.details = details

    @property
    def payload(self) -> dict[str, Any]:
        return {"error": self.code, **self.details}


class NotFoundError(ServiceError):
    code = "not_found"


class RateLimitedError(ServiceError):
    code = "rate_limited"


class InvalidRequestError(ServiceError):
    code = "invalid_request"


@dataclass(frozen=True)
class EndpointTiming:
    ok_ms: int
    rejected_ms: int


# Each endpoint answers `skew` ms past the 10 ms tick that every other duration in the
# simulation falls on. Calls to different endpoints therefore never complete at the very
# same instant, while identical-endpoint calls started together always do, as they would
# when served by one connection pool.
ENDPOINT_SKEW_MS: dict[str, int] = {
    "order_lookup": 1, "track_shipment": 2, "invoice_lookup": 3, "billing_account": 4,
    "refund_lookup": 5, "create_refund": 6, "kb_search": 7, "send_password_reset": 8,
}


class InvoiceRenderLimiter:
    """The invoice service renders PDFs on demand and admits one request per account every 2 s."""

    window_ms = 2_000

    def __init__(self) -> None:
        self._next_allowed_ns: dict[str, int] = {}

    def admit(self, account: str, now_ns: int) -> None:
        next_allowed = self._next_allowed_ns.get(account, 0)
        if now_ns < next_allowed:
            retry_after_s = math.ceil((next_allowed - now_ns) / (1_000 * NS_PER_MS))
            raise RateLimitedError("invoice service is rate limiting this account", retry_after=retry_after_s)
        self._next_allowed_ns[account] = now_ns + self.window_ms * NS_PER_MS


class Backend:
    """Fresh per ticket: holds the latency profile, rate-limit state and refunds issued."""

    def __init__(self, rng: random.Random) -> None:
        self.timings = {
            name: EndpointTiming(
                ok_ms=rng.randrange(8, 30) * TICK_MS + skew, rejected_ms=rng.randrange(1, 4) * TICK_MS + skew
            )
            for name, skew in ENDPOINT_SKEW_MS.items()
        }
        self._invoice_limiter = InvoiceRenderLimiter()
        self._issued_refunds: dict[str, dict[str, Any]] = {}
        self._endpoints: dict[str, Callable[..., dict[str, Any]]] = {
            "order_lookup": self.order_lookup,
            "track_shipment": self.track_shipment,
            "invoice_lookup": self.invoice_lookup,
            "billing_account": self.billing_account,
            "refund_lookup": self.refund_lookup,
            "create_refund": self.create_refund,
            "kb_search": self.kb_search,
            "send_password_reset": self.send_password_reset,
        }

    def call(self, endpoint: str, arguments: dict[str, Any], *, customer_id: str, now_ns: int) -> dict[str, Any]:
        handler = self._endpoints[endpoint]
        if endpoint == "invoice_lookup":
            self._invoice_limiter.admit(customer_id, now_ns)
        return handler(**arguments)

    def order_lookup(self, order_id: str) -> dict[str, Any]:
        order = ORDERS.get(order_id)
        if order is None:
            raise NotFoundError(f"no order {order_id}", message=f"No order with id {order_id}")
        return {"order_id": order_id, **{key: value for key, value in order.items() if key != "customer_id"}}

    def track_shipment(self, order_id: str) -> dict[str, Any]:
        shipment = SHIPMENTS.get(order_id)
        if shipment is None:
            raise NotFoundError(f"no shipment for {order_id}", message=f"No shipment for order {order_id}")
        return {"order_id": order_id, **shipment}

    def invoice_lookup(self, invoice_id: str) -> dict[str, Any]:
        invoice = INVOICES.get(invoice_id)
        if invoice is None:
            raise NotFoundError(f"no invoice {invoice_id}", message=f"No invoice with id {invoice_id}")
        return {"invoice_id": invoice_id, **{key: value for key, value in invoice.items() if key != "customer_id"}}

    def billing_account(self, customer_id: str) -> dict[str, Any]:
        return {"customer_id": customer_id, **BILLING_ACCOUNTS[customer_id]}

    def refund_lookup(self, order_id: str) -> dict[str, Any]:
        if order_id not in ORDERS:
            raise NotFoundError(f"no order {order_id}", message=f"No order with id {order_id}")
        existing = REFUNDS.get(order_id) or self._issued_refunds.get(order_id)
        if existing is not None:
            return {"order_id": order_id, "refund": existing}
        eligibility = REFUND_ELIGIBILITY.get(order_id)
        return {
            "order_id": order_id,
            "refund": None,
            "eligible": eligibility is not None,
            "refundable_amount": eligibility["amount"] if eligibility else 0.0,
            "basis": eligibility["basis"] if eligibility else "outside the refund policy",
        }

    def create_refund(self, reason: str, order_id: str | None = None, invoice_id: str | None = None) -> dict[str, Any]:
        if order_id is not None:
            eligibility = REFUND_ELIGIBILITY.get(order_id)
            if eligibility is None:
                raise InvalidRequestError(f"order {order_id} is not eligible", message="Not eligible for a refund")
            reference, amount = order_id, eligibility["amount"]
            refund_id = "RF-7" + order_id[-3:]
        elif invoice_id is not None and len(INVOICES.get(invoice_id, {}).get("charges", [])) > 1:
            reference, amount = invoice_id, INVOICES[invoice_id]["amount"]
            refund_id = "RF-8" + invoice_id[-3:]
        else:
            raise InvalidRequestError("nothing to refund", message="No refundable charge found")
        refund = {"refund_id": refund_id, "status": "pending", "amount": amount, "reason": reason,
                  "arrives_in": "5-7 business days", "destination": "original payment method"}
        self._issued_refunds[reference] = refund
        return {"reference": reference, "refund": refund}

    def kb_search(self, query: str) -> dict[str, Any]:
        words = set(re.findall(r"[a-z]+", query.lower()))
        scored = [(len(words & set(article["keywords"])), index) for index, article in enumerate(KB_ARTICLES)]
        ranked = [KB_ARTICLES[index] for score, index in sorted(scored, key=lambda pair: (-pair[0], pair[1])) if score]
        hits = [{key: article[key] for key in ("id", "title", "summary", "url")} for article in ranked[:2]]
        return {"query": query, "articles": hits}

    def send_password_reset(self, email: str) -> dict[str, Any]:
        if not any(customer["email"] == email for customer in CUSTOMERS.values()):
            raise NotFoundError(f"no account for {email}", message="No account with that email")
        return {"email": email, "sent": True, "expires_in_minutes": 30}
