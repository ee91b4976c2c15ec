"""Where each planted fault acted in one run: the deciding agent, its LLM step, and the tool calls it caused.

Read from the run, never written into it. While a task runs, `decision_probe` wraps the two decision functions that
hold a fault's switch (`Planner.route`, `Mediator.merge`, both pure) and asks each, on the same input, what the
correct variant returns; a difference is a decision the fault made. The wrappers return what the wrapped method
returned, so the agents behave and the spans come out exactly as without the probe. `retry_loop`'s decision sits in a
generator with side effects (`ToolWorker._call_with_retries`), which cannot be replayed, so it is read from the
finished spans instead: a retry issued sooner than the `retry_after` the tool answered, which the correct code always
waits. The agents' source is not touched: `target_source.py` rewrites it by exact text, and hooks there would leak
into the evolution target.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ..agents.mediator import Mediator
from ..agents.planner import Intent, Planner
from ..config import BugSwitches
from ..tools import ToolResult

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Decision:
    """A decision a fault's code path made differently from the correct one, as the probe saw it."""

    bug: str
    agent: str
    # misroute: the misrouted request's order / invoice ids; mediator_race: call ids of the findings it dropped.
    subjects: tuple[str, ...] = ()
    # misroute: the worker the request went to instead.
    worker: str = ""


def _switched_off(agent: Any, bug: str) -> Any:
    """The same agent with one switch off: what the correct variant decides on the same input."""
    clone = copy.copy(agent)
    config = agent.context.config
    bugs = dataclasses.replace(config.bugs, **{bug: False})
    clone.context = dataclasses.replace(agent.context, config=dataclasses.replace(config, bugs=bugs))
    return clone


@contextmanager
def decision_probe() -> Iterator[list[Decision]]:
    """Collect the faults' decisions made inside the `with` block (one run at a time: it patches the classes)."""
    decisions: list[Decision] = []
    route, merge = Planner.route, Mediator.merge

    def probed_route(self: Planner, intent: Intent) -> str:
        worker = route(self, intent)
        if self.context.config.bugs.misroute and worker != route(_switched_off(self, "misroute"), intent):
            subjects = intent.order_ids or intent.invoice_ids
            decisions.append(Decision("misroute", self.name, subjects=tuple(subjects), worker=worker))
        return worker

    def probed_merge(self: Mediator, results: Sequence[ToolResult]) -> list[ToolResult]:
        merged = merge(self, results)
        if self.context.config.bugs.mediator_race:
            kept = {id(result) for result in merged}
            correct = merge(_switched_off(self, "mediator_race"), results)
            dropped = tuple(result.call.call_id for result in correct if id(result) not in kept)
            if dropped:
                decisions.append(Decision("mediator_race", self.name, subjects=dropped))
        return merged

    Planner.route, Mediator.merge = probed_route, probed_merge  # type: ignore[method-assign]
    try:
        yield decisions
    finally:
        Planner.route, Mediator.merge = route, merge  # type: ignore[method-assign]


def _attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def _operation(span: ReadableSpan) -> str:
    return str(_attr(span, "gen_ai.operation.name") or "")


def _json(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None


class TraceSpans:
    """One trace's finished spans (in export order), indexed the ways the labels need."""

    def __init__(self, spans: Sequence[ReadableSpan]) -> None:
        self.spans = list(spans)
        export_order = {id(span): index for index, span in enumerate(self.spans)}
        root_ids = {span.context.span_id for span in self.spans if span.parent is None}
        # Steps as a trace viewer lists them: the non-root model calls and tool calls, by start time.
        self.steps = sorted(
            (span for span in self.spans if _operation(span) in ("chat", "execute_tool")),
            key=lambda span: (span.start_time or 0, export_order[id(span)]),
        )
        self.agent_spans = {
            str(_attr(span, "gen_ai.agent.name")): span
            for span in self.spans
            if _operation(span) == "invoke_agent" and span.context.span_id not in root_ids
        }

    def step_index(self, span: ReadableSpan) -> int:
        return next(index for index, step in enumerate(self.steps) if step is span)

    def chats(self, agent: str) -> list[ReadableSpan]:
        """The model calls made inside `agent`'s invoke_agent span, in step order."""
        parent = self.agent_spans.get(agent)
        if parent is None:
            return []
        return [
            span for span in self.steps
            if _operation(span) == "chat" and span.parent is not None
            and span.parent.span_id == parent.context.span_id
        ]

    def tool_calls(self, *, agent: str | None = None, call_id: str | None = None) -> list[ReadableSpan]:
        return [
            span for span in self.steps
            if _operation(span) == "execute_tool"
            and (agent is None or _attr(span, "gen_ai.agent.name") == agent)
            and (call_id is None or _attr(span, "gen_ai.tool.call.id") == call_id)
        ]

    def chat_issuing(self, *, agent: str, call_id: str) -> ReadableSpan | None:
        """`agent`'s model call whose reply asked for the tool call `call_id`."""
        for span in self.chats(agent):
            for message in _json(_attr(span, "gen_ai.output.messages")) or []:
                for part in message.get("parts", []):
                    if part.get("type") == "tool_call" and part.get("id") == call_id:
                        return span
        return None


@dataclass
class Mistake:
    bug: str
    agent: str
    step: ReadableSpan  # the deciding agent's LLM step
    agent_span: ReadableSpan
    tool_spans: list[ReadableSpan] = dataclasses.field(default_factory=list)  # tool calls the decision caused
    lost_spans: list[ReadableSpan] = dataclasses.field(default_factory=list)  # tool results the decision discarded


def _probed_mistake(decision: Decision, trace: TraceSpans) -> Mistake | None:
    chats = trace.chats(decision.agent)
    if not chats:
        return None
    # The planner and the mediator each make one model call, whose reply carries the decision (plan or brief).
    mistake = Mistake(decision.bug, decision.agent, chats[-1], trace.agent_spans[decision.agent])
    if decision.bug == "misroute":
        subjects = set(decision.subjects)
        mistake.tool_spans = [
            span for span in trace.tool_calls(agent=decision.worker)
            if subjects & {str(value) for value in (_json(_attr(span, "gen_ai.tool.call.arguments")) or {}).values()}
        ]
    elif decision.bug == "mediator_race":
        # The last attempt of each dropped call is the result the mediator received and lost.
        mistake.lost_spans = [trace.tool_calls(call_id=call_id)[-1]
                              for call_id in decision.subjects if trace.tool_calls(call_id=call_id)]
    return mistake


def _early_retries(trace: TraceSpans) -> list[Mistake]:
    """retry_loop: a rate-limited call sent again before the `retry_after` its error named (read from spans)."""
    by_call: dict[str, list[ReadableSpan]] = {}
    for span in trace.tool_calls():
        by_call.setdefault(str(_attr(span, "gen_ai.tool.call.id")), []).append(span)
    mistakes: list[Mistake] = []
    for call_id, attempts in by_call.items():
        early = []
        for previous, retry in zip(attempts, attempts[1:]):
            error = _json(_attr(previous, "gen_ai.tool.call.result")) or {}
            limited = previous.status.status_code is StatusCode.ERROR and error.get("error") == "rate_limited"
            wait_ns = int(error.get("retry_after", 1)) * NS_PER_S
            if limited and (retry.start_time or 0) - (previous.end_time or 0) < wait_ns:
                early.append(retry)
        agent = str(_attr(attempts[0], "gen_ai.agent.name"))
        step = trace.chat_issuing(agent=agent, call_id=call_id)
        if early and step is not None:
            mistakes.append(Mistake("retry_loop", agent, step, trace.agent_spans[agent], tool_spans=early))
    return mistakes


def trace_mistakes(*, spans: Sequence[ReadableSpan], decisions: Sequence[Decision], bugs: BugSwitches) -> tuple[
    TraceSpans, list[Mistake]
]:
    """The mistakes of one trace, one per (fault, deciding step), in step order."""
    trace = TraceSpans(spans)
    found = [m for m in (_probed_mistake(d, trace) for d in decisions if getattr(bugs, d.bug)) if m is not None]
    if bugs.retry_loop:
        found += _early_retries(trace)
    merged: dict[tuple[str, int], Mistake] = {}
    for mistake in found:
        key = (mistake.bug, mistake.step.context.span_id)
        if key in merged:
            merged[key].tool_spans += [s for s in mistake.tool_spans if s not in merged[key].tool_spans]
            merged[key].lost_spans += [s for s in mistake.lost_spans if s not in merged[key].lost_spans]
        else:
            merged[key] = mistake
    ordered = sorted(merged.values(), key=lambda m: (trace.step_index(m.step), m.bug))
    for mistake in ordered:
        mistake.tool_spans.sort(key=trace.step_index)
        mistake.lost_spans.sort(key=trace.step_index)
    return trace, ordered
