"""Mediator: collects what the workers found and merges it into one brief for the writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span

from ..llm import Reply, system_message, user_message
from ..runtime import Process
from ..telemetry import to_json
from ..tools import ToolResult
from .base import Agent
from .workers import WorkerReport

MEDIATOR_PROMPT = (
    "You are the mediator of a customer support desk. Several workers looked things up in parallel. "
    "Merge their findings into a single brief, in the order they arrived, without dropping or inventing facts."
)


@dataclass(frozen=True)
class Finding:
    tool: str
    arguments: dict[str, Any]
    ok: bool
    payload: dict[str, Any]

    @classmethod
    def from_result(cls, result: ToolResult) -> Finding:
        return cls(result.call.name, dict(result.call.arguments), result.ok, result.payload)

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments, "ok": self.ok, "result": self.payload}


@dataclass(frozen=True)
class Brief:
    findings: tuple[Finding, ...]

    def as_json(self) -> str:
        return to_json({"findings": [finding.as_dict() for finding in self.findings]})


class Mediator(Agent):
    name = "mediator"
    description = "Merges the workers' findings into one brief."

    def merge(self, results: Sequence[ToolResult]) -> list[ToolResult]:
        """Order the findings by the instant each tool call completed."""
        if self.context.config.bugs.mediator_race:
            by_completion: dict[int, ToolResult] = {}
            for result in results:
                by_completion[result.finished_at_ns] = result
            return [by_completion[instant] for instant in sorted(by_completion)]
        # sorted() is stable: results that completed together keep the workers' order.
        return sorted(results, key=lambda result: result.finished_at_ns)

    def run(self, reports: Sequence[WorkerReport], *, parent: Span) -> Process[Brief]:
        span = self.open_span(parent)
        arrived = [result for report in reports for result in report.results]
        brief = Brief(tuple(Finding.from_result(result) for result in self.merge(arrived)))
        findings_by_worker = {
            report.worker: [Finding.from_result(result).as_dict() for result in report.results] for report in reports
        }
        yield from self.context.model.chat(
            agent_name=self.name,
            model=self.context.config.models.mediator,
            messages=[system_message(MEDIATOR_PROMPT), user_message(to_json(findings_by_worker))],
            reply=Reply(text=brief.as_json()),
            parent=span,
        )
        self.context.tracing.end(span)
        return brief
