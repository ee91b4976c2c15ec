"""The steps of a trace as attribution sees them: one speaker turn each, in order, with its text.

* When spans carry `agent.step_index` (group chats such as Who&When: one span per message), exactly those spans are
  the steps, ordered by that index, and the index is the step number.
* Otherwise the steps are the non-root LLM, TOOL and RETRIEVER spans plus the AGENT spans that have none of those
  below them (an agent that is itself one message), in start order; the step number is the position.

`author` answers "who made this step happen": for a tool call, the nearest preceding actor step (the turn that wrote
the code or issued the call; the executor's error is a symptom of that turn), for an actor step the step itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.judges.contract import SpanView, TraceView
from diagnosis.judges.text import plain_text

STEP_INDEX_KEY = "agent.step_index"
ACTOR_KINDS = ("AGENT", "LLM")
LEAF_KINDS = ("LLM", "TOOL", "RETRIEVER")


@dataclass(slots=True)
class Step:
    position: int  # 0-based among the trace's steps
    index: int  # agent.step_index when present, else the position
    span_id: str
    agent: str  # the speaker: the agent's name, or the tool's for a tool call
    kind: str
    status: str
    text: str  # what the step said or returned
    input_text: str = ""  # a tool call's arguments or an LLM call's prompt (not shown for group-chat messages)
    tool_name: str = ""

    @property
    def is_actor(self) -> bool:
        return self.kind in ACTOR_KINDS

    @property
    def label(self) -> str:
        return f"step {self.index} ({self.agent})"


def _step_index(span: SpanView) -> int | None:
    value = (span.attributes or {}).get(STEP_INDEX_KEY)
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None and str(value).strip() != "" else None
    except (TypeError, ValueError):
        return None


def _speaker(span: SpanView) -> str:
    if span.kind == "TOOL" and span.tool_name:
        return span.tool_name
    if span.node:
        return span.node
    name = span.name or ""
    for prefix in ("invoke_agent ", "execute_tool ", "chat ", "agent "):
        if name.startswith(prefix):
            return name[len(prefix):].strip()
    return name


def _roots(trace: TraceView) -> set[str]:
    ids = {span.span_id for span in trace.spans}
    return {span.span_id for span in trace.spans if not span.parent_span_id or span.parent_span_id not in ids}


def step_spans(trace: TraceView) -> list[tuple[SpanView, int]]:
    """(span, step number) in step order."""
    indexed = [(span, _step_index(span)) for span in trace.spans]
    with_index = [(span, index) for span, index in indexed if index is not None]
    if with_index:
        order = {span.span_id: position for position, span in enumerate(trace.spans)}
        with_index.sort(key=lambda pair: (pair[1], order[pair[0].span_id]))
        return with_index
    roots = _roots(trace)
    has_leaf_below: set[str] = set()
    by_id = {span.span_id: span for span in trace.spans}
    for span in trace.spans:
        if span.kind in LEAF_KINDS:
            parent = by_id.get(span.parent_span_id)
            seen = 0
            while parent is not None and seen < 200:
                has_leaf_below.add(parent.span_id)
                parent = by_id.get(parent.parent_span_id)
                seen += 1
    chosen = [span for span in trace.spans
              if span.span_id not in roots and (span.kind in LEAF_KINDS or
                                                (span.kind == "AGENT" and span.span_id not in has_leaf_below))]
    if not chosen:  # a flat trace of one span, or only a root agent: the root is the only step
        chosen = [span for span in trace.spans if span.kind in ACTOR_KINDS + LEAF_KINDS][:1]
    return [(span, position) for position, span in enumerate(chosen)]


def trace_steps(trace: TraceView) -> list[Step]:
    steps = []
    for position, (span, index) in enumerate(step_spans(trace)):
        input_text = "" if span.kind == "AGENT" else plain_text(span.input)
        text = plain_text(span.output)
        if not text and span.status_message:
            text = span.status_message
        steps.append(Step(position=position, index=index, span_id=span.span_id, agent=_speaker(span), kind=span.kind,
                          status=span.status, text=text, input_text=input_text, tool_name=span.tool_name))
    return steps


def author(steps: list[Step], position: int) -> Step:
    """The step responsible for what happened at `position`: itself for an actor, else the preceding actor."""
    step = steps[position]
    if step.is_actor:
        return step
    for earlier in reversed(steps[:position]):
        if earlier.is_actor:
            return earlier
    return step


def goal_text(trace: TraceView) -> str:
    return plain_text(trace.goal) if trace.goal is not None else ""
