"""The support desk itself: plan, fan out to workers, merge, write."""

from __future__ import annotations

from opentelemetry.trace import Span

from .agents import DeskContext, Mediator, Planner, Writer, build_worker
from .agents.workers import WorkerReport
from .runtime import Gather, Process

DESK_AGENT_NAME = "support_desk"
DESK_DESCRIPTION = "Answers customer support tickets with a team of specialised agents."


def handle_ticket(context: DeskContext, ticket: str, *, root: Span) -> Process[str]:
    """One ticket end to end; every agent span hangs off `root`."""
    assignments = yield from Planner(context).plan(ticket, parent=root)
    workers = [build_worker(assignment.worker, context) for assignment in assignments]
    reports: list[WorkerReport] = yield Gather(
        [worker.run(assignment, parent=root) for worker, assignment in zip(workers, assignments)]
    )
    brief = yield from Mediator(context).run(reports, parent=root)
    answer = yield from Writer(context).write(ticket, brief, parent=root)
    return answer
