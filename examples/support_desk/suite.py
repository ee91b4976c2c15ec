"""Running tickets: one trace per task, graded, with the grade written on the root span."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from .agents import DeskContext
from .backend import Backend
from .config import BugSwitches, DeskConfig
from .desk import DESK_AGENT_NAME, DESK_DESCRIPTION, handle_ticket
from .llm import ScriptedModel, assistant_message, user_message
from .runtime import Scheduler
from .tasks import TASKS, Task, get_task, grade, select_tasks
from .telemetry import RunTelemetry, Tracing, to_json
from .tools import ToolCallIds, ToolRunner

EPOCH = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
EPOCH_NS = int(EPOCH.timestamp()) * 1_000_000_000
SECONDS_PER_SEED = 86_400
SECONDS_PER_TASK_SLOT = 120

BugsArgument = str | Iterable[str] | BugSwitches | None


@dataclass(frozen=True)
class TaskResult:
    task_id: str
    seed: int
    score: float
    outcome: str
    answer: str
    trace_id: str
    failed_checks: tuple[str, ...] = ()

    def as_json_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failed_checks"] = list(self.failed_checks)
        return data


@dataclass
class SuiteReport:
    results: list[TaskResult] = field(default_factory=list)
    exported_spans: int = 0
    failed_spans: int = 0

    @property
    def mean_score(self) -> float:
        return sum(result.score for result in self.results) / len(self.results) if self.results else 0.0

    @property
    def passed(self) -> int:
        return sum(result.outcome == "success" for result in self.results)


def task_start_ns(task: Task, seed: int) -> int:
    """Where a task's trace sits on the virtual timeline.

    Each seed gets its own virtual day and each task a fixed two-minute slot in it, so
    traces of one suite never overlap and a single task re-run by id and seed lands on
    exactly the timestamps it had inside the suite.
    """
    slot = [candidate.task_id for candidate in TASKS].index(task.task_id)
    jitter_s = random.Random(f"support-desk:{seed}:{task.task_id}:arrival").randrange(0, 60)
    offset_s = (seed % 3_650) * SECONDS_PER_SEED + slot * SECONDS_PER_TASK_SLOT + jitter_s
    return EPOCH_NS + offset_s * 1_000_000_000


def _run_one(task: Task, seed: int, config: DeskConfig, telemetry: RunTelemetry) -> TaskResult:
    clock = Scheduler(task_start_ns(task, seed))
    rng = random.Random(f"support-desk:{seed}:{task.task_id}")
    tracing = Tracing(telemetry.tracer, clock)
    backend = Backend(rng)
    context = DeskContext(
        config=config,
        clock=clock,
        tracing=tracing,
        model=ScriptedModel(config.models, rng, tracing),
        tools=ToolRunner(backend=backend, tracing=tracing, clock=clock, customer_id=task.customer_id),
        call_ids=ToolCallIds(rng),
        rng=rng,
        customer_id=task.customer_id,
        conversation_id=f"ticket-{rng.randrange(100_000, 1_000_000)}",
    )
    root = tracing.start(
        f"invoke_agent {DESK_AGENT_NAME}",
        parent=None,
        kind=SpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": DESK_AGENT_NAME,
            "gen_ai.agent.description": DESK_DESCRIPTION,
            "gen_ai.conversation.id": context.conversation_id,
            "gen_ai.input.messages": to_json([user_message(task.ticket)]),
            "enduser.id": task.customer_id,
            "clear.task.id": task.task_id,
            "clear.seed": seed,
            "clear.timing": "synthetic",
        },
    )
    try:
        answer = clock.run(handle_ticket(context, task.ticket, root=root))
    except Exception as error:  # noqa: BLE001 - a crashed ticket is graded, not fatal to the suite
        tracing.record_error(root, error)
        answer = ""
    verdict = grade(task, answer)
    root.set_attributes(
        {
            "gen_ai.output.messages": to_json([{**assistant_message(answer), "finish_reason": "stop"}]),
            "clear.outcome": verdict.outcome,
            "clear.score": verdict.score,
        }
    )
    if verdict.outcome == "success":
        root.set_status(Status(StatusCode.OK))
    tracing.end(root)
    return TaskResult(
        task_id=task.task_id,
        seed=seed,
        score=verdict.score,
        outcome=verdict.outcome,
        answer=answer,
        trace_id=f"{root.get_span_context().trace_id:032x}",
        failed_checks=tuple(check.description for check in verdict.checks if not check.passed),
    )


def execute_suite(
    *,
    release: str = "dev",
    bugs: BugsArgument = None,
    seed: int = 0,
    exporter: SpanExporter | None = None,
    task_ids: str | Sequence[str] | None = None,
) -> SuiteReport:
    """Run tasks in catalogue order on one fresh TracerProvider, exporting after each task."""
    config = DeskConfig(bugs=BugSwitches.parse(bugs))
    telemetry = RunTelemetry(release=release, exporter=exporter)
    report = SuiteReport()
    for task in select_tasks(task_ids):
        report.results.append(_run_one(task, seed, config, telemetry))
        telemetry.flush()
    report.exported_spans = telemetry.exported_count
    report.failed_spans = telemetry.failed_count
    return report


def run_suite(
    *,
    release: str = "dev",
    bugs: BugsArgument = None,
    seed: int = 0,
    exporter: SpanExporter | None = None,
    task_ids: str | Sequence[str] | None = None,
) -> list[TaskResult]:
    return execute_suite(release=release, bugs=bugs, seed=seed, exporter=exporter, task_ids=task_ids).results


def run_task(
    task_id: str,
    seed: int = 0,
    bugs: BugsArgument = None,
    exporter: SpanExporter | None = None,
    *,
    release: str = "dev",
) -> TaskResult:
    """Re-run one task exactly as it ran inside a suite with the same seed and switches."""
    get_task(task_id)
    return execute_suite(release=release, bugs=bugs, seed=seed, exporter=exporter, task_ids=[task_id]).results[0]
