"""Fast unit tests of the support desk (run with `python -m pytest -q tests` from the repository root)."""

from __future__ import annotations

import pytest

from support_desk import TASKS, get_task, grade, run_task
from support_desk.agents.planner import extract_intents
from support_desk.runtime import Gather, Scheduler, Sleep


def test_planner_reads_every_order_id_of_a_status_question() -> None:
    intents = extract_intents("Can you check the status of my orders O-5010 and O-5011?")
    assert [(intent.kind, intent.order_ids) for intent in intents] == [("order_status", ("O-5010", "O-5011"))]


def test_planner_splits_a_ticket_with_two_requests() -> None:
    intents = extract_intents("Where's my order O-5016, and has invoice INV-9014 been paid?")
    assert [(intent.kind, intent.order_ids, intent.invoice_ids) for intent in intents] == [
        ("shipping", ("O-5016",), ()),
        ("invoice", (), ("INV-9014",)),
    ]


def test_concurrent_processes_share_virtual_time() -> None:
    def wait(ms: int, label: str):
        yield Sleep(ms)
        return label

    def main():
        results = yield Gather([wait(30, "slow"), wait(10, "fast")])
        return results

    clock = Scheduler(0)
    assert clock.run(main()) == ["slow", "fast"]
    assert clock.now_ns == 30 * 1_000_000


def test_grade_needs_every_check() -> None:
    task = get_task("order-status-shipped")
    assert grade(task, "Order O-5001 has shipped.").outcome == "success"
    partial = grade(task, "Order O-5001 is on its way.")
    assert partial.outcome == "failure" and 0 < partial.score < 1


def test_a_single_order_ticket_is_answered() -> None:
    result = run_task("order-status-shipped", seed=3)
    assert result.outcome == "success", result.failed_checks


def test_same_seed_same_answer() -> None:
    assert run_task("password-reset", seed=5).answer == run_task("password-reset", seed=5).answer


def test_the_suite_has_unique_task_ids() -> None:
    ids = [task.task_id for task in TASKS]
    assert len(ids) == len(set(ids)) == 22


def test_unknown_task_is_refused() -> None:
    with pytest.raises(KeyError):
        get_task("no-such-task")
