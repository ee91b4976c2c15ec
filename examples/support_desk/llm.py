"""Scripted stand-in for a chat model: the reply is decided by the agent's policy, while
this module accounts for it the way a real client would (tokens, latency, a `chat` span).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span, SpanKind

from .config import ModelLabels
from .runtime import TICK_MS, Process, Sleep
from .telemetry import Tracing, to_json
from .tools import ToolCall, ToolResult

Message = dict[str, Any]


def system_message(text: str) -> Message:
    return {"role": "system", "parts": [{"type": "text", "content": text}]}


def user_message(text: str) -> Message:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def assistant_message(text: str | None = None, tool_calls: Sequence[ToolCall] = ()) -> Message:
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    parts.extend(call.as_message_part() for call in tool_calls)
    return {"role": "assistant", "parts": parts}


def tool_message(result: ToolResult) -> Message:
    return {"role": "tool", "parts": [result.as_message_part()]}


def estimate_tokens(payload: Any) -> int:
    """Roughly four characters per token, like the tokenizers the labels refer to."""
    text = payload if isinstance(payload, str) else json.dumps(payload, sort_keys=True)
    return max(1, math.ceil(len(text) / 4))


@dataclass(frozen=True)
class Reply:
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"

    def as_output_message(self) -> Message:
        return {**assistant_message(self.text, self.tool_calls), "finish_reason": self.finish_reason}


@dataclass
class ScriptedModel:
    labels: ModelLabels
    rng: random.Random
    tracing: Tracing
    # Decode speed is a property of the run (load on the provider), not of each call.
    ms_per_output_token: float = field(init=False)

    def __post_init__(self) -> None:
        self.ms_per_output_token = self.rng.choice((6.0, 8.0, 11.0))

    def chat(
        self, *, agent_name: str, model: str, messages: Sequence[Message], reply: Reply, parent: Span
    ) -> Process[Reply]:
        output_message = reply.as_output_message()
        input_tokens = estimate_tokens(list(messages))
        output_tokens = estimate_tokens(output_message)
        span = self.tracing.start(
            f"chat {model}",
            parent=parent,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": self.labels.provider,
                "gen_ai.agent.name": agent_name,
                "gen_ai.request.model": model,
                "gen_ai.request.temperature": 0.0,
                "gen_ai.input.messages": to_json(list(messages)),
            },
        )
        time_to_first_token_ms = self.rng.randrange(18, 45) * TICK_MS
        decode_ms = math.ceil(output_tokens * self.ms_per_output_token / TICK_MS) * TICK_MS
        yield Sleep(time_to_first_token_ms + decode_ms)
        span.set_attributes(
            {
                "gen_ai.response.model": ModelLabels.response_model(model),
                "gen_ai.response.id": f"chatcmpl-{self.rng.getrandbits(96):024x}",
                "gen_ai.response.finish_reasons": (reply.finish_reason,),
                "gen_ai.usage.input_tokens": input_tokens,
                "gen_ai.usage.output_tokens": output_tokens,
                "gen_ai.output.messages": to_json([output_message]),
            }
        )
        self.tracing.end(span)
        return reply
