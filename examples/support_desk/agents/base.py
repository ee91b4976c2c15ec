"""What every agent of one ticket shares, and the `invoke_agent` span they all open."""

from __future__ import annotations

import random
from dataclasses import dataclass

from opentelemetry.trace import Span, SpanKind

from ..config import DeskConfig
from ..llm import ScriptedModel
from ..runtime import Scheduler
from ..telemetry import Tracing
from ..tools import ToolCallIds, ToolRunner


@dataclass
class DeskContext:
    config: DeskConfig
    clock: Scheduler
    tracing: Tracing
    model: ScriptedModel
    tools: ToolRunner
    call_ids: ToolCallIds
    rng: random.Random
    customer_id: str
    conversation_id: str


class Agent:
    name: str = "agent"
    description: str = ""

    def __init__(self, context: DeskContext) -> None:
        self.context = context

    def open_span(self, parent: Span) -> Span:
        return self.context.tracing.start(
            f"invoke_agent {self.name}",
            parent=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.name,
                "gen_ai.agent.description": self.description,
                "gen_ai.conversation.id": self.context.conversation_id,
            },
        )
