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

from .runtime import NS_PER_MS

CUSTOMERS: dict[str, dict[str, Any]] = {
    "C-1001": {"name": "Alice Moreau", "email": "alice@example.com"},
    "C-1002": {"name": "Ben Okafor", "email": "ben@example.com"},
    "C-1003": {"name": "Chen Wei", "email": "chen@example.com"},
    "C-1004": {"name": "Dana Levi", "email": "dana@example.com"},
    "C-1005": {"name": "Emil Novak", "email": "emil@example.com"},
    "C-1006": {"name": "Fatima Khan", "email": "fatima@example.com"},
}

ORDERS: dict[str, dict[str, Any]] = {
    "O-5001": {"customer_id": "C-1001", "status": "shipped", "placed_at": "2025-01-02", "items": ["Trail running shoes"], "total": 120.00},
    "O-5003": {"customer_id": "C-1002", "status": "shipped", "placed_at": "2024-12-30", "items": ["Standing desk"], "total": 349.00},
    "O-5004": {"customer_id": "C-1003", "status": "shipped", "placed_at": "2025-01-03", "items": ["Noise-cancelling headphones"], "total": 199.00},
    "O-5006": {"customer_id": "C-1004", "status": "delivered", "placed_at": "2024-12-20", "items": ["Blender"], "total": 89.00},
    "O-5007": {"customer_id": "C-1005", "status": "returned", "placed_at": "2024-12-10", "items": ["Wool coat"], "total": 145.00},
    "O-5008": {"customer_id": "C-1006", "status": "cancelled", "placed_at": "2025-01-04", "items": ["Espresso machine"], "total": 259.00},
    "O-5009": {"customer_id": "C-1001", "status": "delivered", "placed_at": "2024-12-15", "items": ["Desk lamp"], "total": 51.99},
    "O-5010": {"customer_id": "C-1002", "status": "processing", "placed_at": "2025-01-05", "items": ["Yoga mat"], "total": 35.00},
    "O-5011": {"customer_id": "C-1002", "status": "shipped", "placed_at": "2025-01-01", "items": ["Water bottle"], "total": 18.00},
    "O-5012": {"customer_id": "C-1003", "status": "shipped", "placed_at": "2025-01-02", "items": ["Backpack"], "total": 79.00},
    "O-5013": {"customer_id": "C-1003", "status": "delivered", "placed_at": "2024-12-28", "items": ["Rain jacket"], "total": 110.00},
    "O-5014": {"customer_id": "C-1005", "status": "delivered", "placed_at": "2024-12-22", "items": ["Cast iron pan"], "total": 45.00},
    "O-5015": {"customer_id": "C-1005", "status": "processing", "placed_at": "2025-01-05", "items": ["Chef's knife"], "total": 65.00},
    "O-5016": {"customer_id": "C-1006", "status": "shipped", "placed_at": "2025-01-03", "items": ["Bookshelf"], "total": 189.00},
}

SHIPMENTS: dict[str, dict[str, Any]] = {
    "O-5001": {"carrier": "UPS", "tracking_number": "1Z999AA10123456784", "status": "in_transit", "eta": "2025-01-09"},
    "O-5003": {"carrier": "FedEx", "tracking_number": "771234567890", "status": "delayed", "eta": "2025-01-14",
               "delay_reason": "severe weather at the Memphis hub"},
    "O-5004": {"carrier": "USPS", "tracking_number": "9400111899223344556677", "status": "in_transit", "eta": "2025-01-10"},
    "O-5011": {"carrier": "UPS", "tracking_number": "1Z999AA10123456799", "status": "in_transit", "eta": "2025-01-08"},
    "O-5012": {"carrier": "DHL", "tracking_number": "JD014600006281234567", "status": "in_transit", "eta": "2025-01-11"},
    "O-5013": {"carrier": "DHL", "tracking_number": "JD014600006281234568", "status": "delivered", "eta": "2025-01-05",
               "delivered_note": "left at the front door"},
    "O-5016": {"carrier": "UPS", "tracking_number": "1Z999AA10123456790", "status": "out_for_delivery", "eta": "2025-01-07"},
}

INVOICES: dict[str, dict[str, Any]] = {
    "INV-9003": {"customer_id": "C-1001", "amount": 41.50, "status": "paid", "issued": "2025-01-12",
                 "lines": ["Pro plan (Jan 12-31, prorated upgrade from Basic)", "Basic plan credit"]},
    "INV-9005": {"customer_id": "C-1002", "amount": 9.00, "status": "paid", "issued": "2025-01-01",
                 "lines": ["Basic plan"], "charges": ["ch_3QbA71", "ch_3QbA72"]},
    "INV-9010": {"customer_id": "C-1003", "amount": 58.00, "status": "paid", "issued": "2025-01-01",
                 "lines": ["Pro plan", "2 extra seats"]},
    "INV-9011": {"customer_id": "C-1003", "amount": 29.00, "status": "paid", "issued": "2024-12-01", "lines": ["Pro plan"]},
    "INV-9012": {"customer_id": "C-1004", "amount": 29.00, "status": "paid", "issued": "2025-01-01", "lines": ["Pro plan (January)"]},
    "INV-9013": {"customer_id": "C-1004", "amount": 15.00, "status": "paid", "issued": "2025-01-03",
                 "lines": ["One-time data export add-on"]},
    "INV-9014": {"customer_id": "C-1006", "amount": 29.00, "status": "paid", "issued": "2025-01-01", "lines": ["Pro plan"]},
    "INV-9015": {"customer_id": "C-1005", "amount": 29.00, "status": "paid", "issued": "2024-12-03", "lines": ["Pro plan"]},
    "INV-9016": {"customer_id": "C-1005", "amount": 34.00, "status": "open", "issued": "2025-01-03",
                 "lines": ["Pro plan", "1 extra seat (from Jan 20, prorated)"]},
}

BILLING_ACCOUNTS: dict[str, dict[str, Any]] = {
    "C-1001": {"plan": "Pro", "next_charge_date": "2025-02-01", "next_charge_amount": 29.00, "payment_method": "Visa ending 4242"},
    "C-1002": {"plan": "Basic", "next_charge_date": "2025-02-01", "next_charge_amount": 9.00, "payment_method": "Mastercard ending 5100"},
    "C-1003": {"plan": "Pro", "next_charge_date": "2025-02-01", "next_charge_amount": 58.00, "payment_method": "Visa ending 1881"},
    "C-1004": {"plan": "Pro", "next_charge_date": "2025-02-01", "next_charge_amount": 29.00, "payment_method": "Amex ending 0005"},
    "C-1005": {"plan": "Pro", "next_charge_date": "2025-02-03", "next_charge_amount": 39.00, "payment_method": "Visa ending 7310"},
    "C-1006": {"plan": "Pro", "next_charge_date": "2025-02-01", "next_charge_amount": 29.00, "payment_method": "Visa ending 6602"},
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

KB_ARTICLES: list[dict[str, Any]] = [
    {"id": "KB-101", "title": "Reset your password", "keywords": ["password", "reset", "forgot", "login", "log"],
     "summary": "Use 'Forgot password' on the sign-in page; the reset link is valid for 30 minutes.",
     "url": "https://help.example.com/kb/101"},
    {"id": "KB-204", "title": "Change the email address on your account", "keywords": ["change", "email", "address"],
     "summary": "Go to Settings > Profile > Email, enter the new address and confirm it from the link we send.",
     "url": "https://help.example.com/kb/204"},
    {"id": "KB-305", "title": "Delete your account", "keywords": ["delete", "close", "account", "remove"],
     "summary": "Go to Settings > Privacy > Delete account; deletion becomes permanent after 14 days.",
     "url": "https://help.example.com/kb/305"},
    {"id": "KB-410", "title": "Returns and refunds policy", "keywords": ["return", "returns", "refund", "policy"],
     "summary": "Items can be returned within 30 days of delivery for a full refund to the original payment method.",
     "url": "https://help.example.com/kb/410"},
    {"id": "KB-512", "title": "Shipping times", "keywords": ["shipping", "international", "delivery", "times"],
     "summary": "Domestic orders arrive in 3-5 business days, international orders in 7-14.",
     "url": "https://help.example.com/kb/512"},
    {"id": "KB-618", "title": "Update your payment method", "keywords": ["credit", "card", "payment", "update", "method"],
     "summary": "Open Billing > Payment methods, add the new card and mark it as default.",
     "url": "https://help.example.com/kb/618"},
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
            name: EndpointTiming(ok_ms=rng.randrange(8, 30) * 10 + skew, rejected_ms=rng.randrange(1, 4) * 10 + skew)
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
                raise InvalidRequestError(f"order {order_id} is not eligible", message="Order is not eligible for a refund")
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
        ranked = [KB_ARTICLES[index] for score, index in sorted(scored, key=lambda pair: (-pair[0], pair[1])) if score > 0]
        hits = [{key: article[key] for key in ("id", "title", "summary", "url")} for article in ranked[:2]]
        return {"query": query, "articles": hits}

    def send_password_reset(self, email: str) -> dict[str, Any]:
        if not any(customer["email"] == email for customer in CUSTOMERS.values()):
            raise NotFoundError(f"no account for {email}", message="No account with that email")
        return {"email": email, "sent": True, "expires_in_minutes": 30}
