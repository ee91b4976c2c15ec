"""The task suite: support tickets with deterministic graders for the final answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Internal error codes must never reach a customer, whatever the ticket.
LEAK_MARKERS: tuple[str, ...] = ("rate_limited", "not_found", "invalid_request", "retry_after")


@dataclass(frozen=True)
class Task:
    task_id: str
    category: str
    customer_id: str
    ticket: str
    must_contain: tuple[str, ...]
    must_not_contain: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    description: str
    passed: bool


@dataclass(frozen=True)
class Grade:
    score: float
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def outcome(self) -> str:
        return "success" if all(check.passed for check in self.checks) else "failure"


def grade(task: Task, answer: str) -> Grade:
    """Score = share of checks passed; the outcome is a success only when all pass."""
    lowered = answer.lower()
    checks = [Check(f"mentions {needle!r}", needle.lower() in lowered) for needle in task.must_contain]
    checks += [
        Check(f"does not mention {needle!r}", needle.lower() not in lowered)
        for needle in (*task.must_not_contain, *LEAK_MARKERS)
    ]
    return Grade(round(sum(check.passed for check in checks) / len(checks), 4), tuple(checks))


TASKS: tuple[Task, ...] = (
    Task("order-status-shipped", "order_status", "C-1001",
         "Hi, what's the status of order O-5001?",
         ("O-5001", "has shipped")),
    Task("order-not-found", "order_status", "C-1002",
         "Can you check on order O-5999? I never got a confirmation email.",
         ("O-5999", "couldn't find"), ("has shipped", "was delivered")),
    Task("shipping-delay", "shipping", "C-1002",
         "My package for order O-5003 is late. What's going on?",
         ("delayed", "weather", "2025-01-14")),
    Task("shipping-tracking-number", "shipping", "C-1003",
         "Where is my order O-5004? Can I get the tracking number?",
         ("9400111899223344556677", "2025-01-10")),
    Task("password-reset", "account", "C-1004",
         "I forgot my password and can't log in. My email is dana@example.com.",
         ("reset link", "dana@example.com", "30 minutes")),
    Task("billing-next-charge", "billing", "C-1001",
         "When is my next charge and how much will it be?",
         ("$29.00", "2025-02-01", "Visa ending 4242")),
    Task("invoice-higher-than-usual", "billing", "C-1001",
         "Why is invoice INV-9003 higher than usual?",
         ("INV-9003", "$41.50", "prorated")),
    Task("return-policy", "knowledge_base", "C-1003",
         "What's your return policy?",
         ("30 days",)),
    Task("update-payment-method", "knowledge_base", "C-1006",
         "How do I update the credit card on my account?",
         ("Payment methods",)),
    Task("refund-duplicate-charge", "refund", "C-1002",
         "I was charged twice for invoice INV-9005, please refund the duplicate.",
         ("RF-8005", "$9.00", "business days")),
    Task("refund-damaged-item", "refund", "C-1004",
         "The blender from order O-5006 arrived broken. I'd like a refund.",
         ("RF-7006", "$89.00", "business days")),
    Task("refund-status", "refund", "C-1005",
         "I returned order O-5007 two weeks ago. Where is my refund?",
         ("RF-6990", "processed", "2025-01-10")),
    Task("refund-cancelled-order", "refund", "C-1006",
         "I cancelled order O-5008 but I was still charged. Please refund me.",
         ("RF-6995", "$259.00", "pending")),
    Task("refund-late-delivery", "refund", "C-1001",
         "Order O-5009 arrived 10 days late. Can I get a refund on the shipping fee?",
         ("RF-7009", "$12.99")),
    Task("two-orders-status", "multi_part", "C-1002",
         "Can you check the status of my orders O-5010 and O-5011?",
         ("O-5010", "being processed", "O-5011", "has shipped")),
    Task("track-two-packages", "multi_part", "C-1003",
         "Where are my packages for orders O-5012 and O-5013?",
         ("JD014600006281234567", "JD014600006281234568", "front door")),
    Task("two-how-to-questions", "multi_part", "C-1001",
         "How do I change my email address, and how do I delete my account?",
         ("Change the email address", "Delete your account")),
    Task("orders-and-next-bill", "multi_part", "C-1005",
         "What's the status of orders O-5014 and O-5015? Also, when is my next bill?",
         ("O-5014", "O-5015", "2025-02-03")),
    Task("compare-two-invoices", "multi_part", "C-1003",
         "Why is invoice INV-9010 twice as much as INV-9011?",
         ("INV-9010", "$58.00", "INV-9011", "$29.00")),
    Task("two-charges-this-month", "multi_part", "C-1004",
         "I see two charges this month, INV-9012 and INV-9013. What are they for?",
         ("INV-9012", "INV-9013", "$15.00", "add-on")),
    Task("invoices-and-next-charge", "multi_part", "C-1005",
         "Can you explain invoices INV-9015 and INV-9016, and tell me when my next charge is?",
         ("INV-9015", "INV-9016", "extra seat", "2025-02-03")),
    Task("order-and-invoice", "multi_part", "C-1006",
         "Where's my order O-5016, and has invoice INV-9014 been paid?",
         ("O-5016", "out for delivery", "INV-9014", "paid")),
)

TASKS_BY_ID: dict[str, Task] = {task.task_id: task for task in TASKS}


def get_task(task_id: str) -> Task:
    try:
        return TASKS_BY_ID[task_id]
    except KeyError:
        raise KeyError(f"unknown task {task_id!r}; run `python -m examples.support_desk list`") from None


def select_tasks(task_ids: str | Sequence[str] | None) -> list[Task]:
    """`None`, `""` or `"all"` select the whole suite; otherwise ids, comma-separated or as a list."""
    if task_ids is None or task_ids in ("", "all"):
        return list(TASKS)
    ids = task_ids.split(",") if isinstance(task_ids, str) else list(task_ids)
    return [get_task(task_id.strip()) for task_id in ids if task_id.strip()]
