"""Compact, lossless-where-possible rendering of spans for the judges, and packing into windows.

* Conversation history is never re-sent: an LLM span whose input messages start with the previous LLM call of the
  same node (its input followed by its output) shows only the new messages, behind an {"omitted": ...} marker naming
  the span that shows the rest. The instructions (system messages and the first user message) are kept once per
  data block so the judge still sees the task. Identical stack traces inside one block are shown once.
* Only a span that alone exceeds the window is cut (middle-out, with a visible "[clear: N characters cut ...]"
  marker) and reported as truncated; nothing else is ever dropped.
* Tokens are estimated as characters / 3.5 (clear.llm.tokens_estimate: JSON-heavy text is denser than prose;
  conservative for windows).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from clear.llm import CHARS_PER_TOKEN
from clear.llm import tokens_estimate as estimate_tokens
from diagnosis.judges.contract import SpanView, TraceView

JUDGED_KINDS = ("LLM", "TOOL", "AGENT")
BRIEF_CHARS = 160
MAX_CHILDREN_LISTED = 20
MIN_CUT_CHARS = 200
_ATTRIBUTE_HINTS = ("finish_reason", "error", "exit_code", "status_code", "tool.description")
_CUTTABLE = ("input", "output", "exceptions", "attributes", "context", "children", "status_message", "goal",
             "final_output", "text")


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _messages(value: Any) -> list[dict] | None:
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return value
    return None


def _message_key(message: dict) -> str:
    return _canonical({k: v for k, v in message.items() if k not in ("finish_reason", "index")})


def _text_of(value: Any) -> str:
    """The readable text of a value: message contents and tool calls rather than their JSON envelope."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(filter(None, (_text_of(item) for item in value)))
    if isinstance(value, dict):
        if isinstance(value.get("content"), str):
            return value["content"]
        if "parts" in value or "tool_calls" in value:
            return _text_of(value.get("parts")) + _text_of(value.get("tool_calls"))
        if "name" in value and "arguments" in value:
            return f"{value['name']}({_canonical(value['arguments'])})"
    return _canonical(value)


def brief(value: Any, limit: int = BRIEF_CHARS) -> str:
    """A one-line gist of a value for context summaries (deliberately short: context, not evidence)."""
    text = " ".join(_text_of(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class TraceIndex:
    trace: TraceView
    by_id: dict[str, SpanView] = field(default_factory=dict)
    children: dict[str, list[SpanView]] = field(default_factory=dict)
    previous_llm: dict[str, SpanView] = field(default_factory=dict)  # span id -> previous LLM span of its node
    root_ids: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, trace: TraceView) -> "TraceIndex":
        index = cls(trace=trace)
        index.by_id = {span.span_id: span for span in trace.spans}
        last_llm: dict[str, SpanView] = {}
        for span in trace.spans:
            parent = span.parent_span_id
            if not parent or parent not in index.by_id:
                index.root_ids.add(span.span_id)
            index.children.setdefault(parent, []).append(span)
            if span.kind == "LLM" and _messages(span.input) is not None:
                if span.node in last_llm:
                    index.previous_llm[span.span_id] = last_llm[span.node]
                last_llm[span.node] = span
        return index

    def previous_siblings(self, span: SpanView, count: int = 2) -> list[SpanView]:
        siblings = [s for s in self.children.get(span.parent_span_id, []) if s.kind in JUDGED_KINDS]
        position = next((i for i, s in enumerate(siblings) if s.span_id == span.span_id), 0)
        return siblings[max(0, position - count):position]


@dataclass
class BlockState:
    """What one data block already shows (so it is not repeated inside the block)."""

    instructions: set[str] = field(default_factory=set)  # system / first user messages already shown
    stacktraces: dict[str, str] = field(default_factory=dict)  # sha1 -> span id showing it


def _instruction_count(messages: list[dict]) -> int:
    """How many leading messages set the task: the system message(s) and the first user message."""
    for position, message in enumerate(messages):
        if message.get("role") == "user":
            return position + 1
        if message.get("role") not in ("system", "developer"):
            return position
    return len(messages)


def _render_input(span: SpanView, index: TraceIndex, state: BlockState) -> Any:
    messages = _messages(span.input)
    if messages is None:
        return span.input
    instructions = _instruction_count(messages)
    previous = index.previous_llm.get(span.span_id)
    prefix = list(_messages(previous.input) or []) + list(_messages(previous.output) or []) if previous else []
    shared = 0
    for old, new in zip(prefix, messages):
        if _message_key(old) != _message_key(new):
            break
        shared += 1
    rendered: list[Any] = []
    omitted = 0
    for position, message in enumerate(messages[:shared]):
        key = _message_key(message)
        if position < instructions and key not in state.instructions:
            rendered.append(message)  # the task stays visible once per data block
        else:
            omitted += 1
    if omitted:
        rendered.append({"omitted": f"{omitted} earlier message(s), shown as the input/output of span "
                                    f"{previous.span_id}"})
    rendered.extend(messages[shared:])
    state.instructions.update(_message_key(m) for m in messages[:instructions])
    return span.input if not omitted else rendered


def _render_exceptions(span: SpanView, state: BlockState) -> list[dict]:
    out = []
    for exc in span.exceptions:
        item = dict(exc)
        trace_text = item.get("stacktrace")
        if isinstance(trace_text, str) and len(trace_text) > BRIEF_CHARS:
            digest = hashlib.sha1(trace_text.encode()).hexdigest()
            if digest in state.stacktraces:
                item["stacktrace"] = f"same stack trace as span {state.stacktraces[digest]}"
            else:
                state.stacktraces[digest] = span.span_id
        out.append(item)
    return out


def render_span(span: SpanView, index: TraceIndex, state: BlockState, *, for_step: bool) -> dict:
    trace = index.trace
    item: dict[str, Any] = {"span_id": span.span_id, "name": span.name, "kind": span.kind, "node": span.node,
                            "status": span.status}
    if not for_step:
        item["parent_span_id"] = span.parent_span_id or None
    if span.status_message:
        item["status_message"] = span.status_message
    if span.model:
        item["model"] = span.model
    if span.tool_name:
        item["tool_name"] = span.tool_name
    is_root = span.span_id in index.root_ids
    if is_root and not for_step and span.input is not None and _canonical(span.input) == _canonical(trace.goal):
        item["input"] = "(the goal, see trace.goal)"
    elif span.input is not None:
        item["input"] = _render_input(span, index, state)
    if is_root and not for_step and span.output is not None and \
            _canonical(span.output) == _canonical(trace.final_output):
        item["output"] = "(the final output, see trace.final_output)"
    elif span.output is not None:
        item["output"] = span.output
    if span.exceptions:
        item["exceptions"] = _render_exceptions(span, state)
    attributes = {k: v for k, v in (span.attributes or {}).items() if any(h in k for h in _ATTRIBUTE_HINTS)}
    if attributes:
        item["attributes"] = attributes
    if span.input_tokens is not None or span.output_tokens is not None:
        item["tokens"] = {"in": span.input_tokens, "out": span.output_tokens}
    if not trace.synthetic_timing and span.end_time is not None:
        item["duration_ms"] = round((span.end_time - span.start_time).total_seconds() * 1000, 1)
    if for_step:
        parent = index.by_id.get(span.parent_span_id)
        item["context"] = {
            "parent": {"span_id": parent.span_id, "name": parent.name, "kind": parent.kind} if parent else None,
            "previous_steps": [
                {"span_id": s.span_id, "name": s.name, "kind": s.kind, "status": s.status,
                 "brief": brief(s.output) if s.output is not None else
                 f"no output recorded; {len(index.children.get(s.span_id, []))} child span(s)"}
                for s in index.previous_siblings(span)
            ],
        }
        if span.kind == "AGENT":
            kids = index.children.get(span.span_id, [])
            item["children"] = [{"span_id": k.span_id, "name": k.name, "kind": k.kind, "status": k.status}
                                for k in kids[:MAX_CHILDREN_LISTED]]
            if len(kids) > MAX_CHILDREN_LISTED:
                item["children"].append({"more_children": len(kids) - MAX_CHILDREN_LISTED})
    return item


def cut_middle(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    head = keep // 2
    tail = keep - head
    cut = len(text) - keep
    return f"{text[:head]}…[clear: {cut} characters cut here to fit the judge window]…{text[len(text) - tail:]}"


def cut_to_fit(item: dict, budget_tokens: int) -> tuple[dict, bool]:
    """Shrink the largest fields middle-out until the item fits; returns (item, whether anything was cut)."""
    item = copy.deepcopy(item)
    cut = False
    for _ in range(50):
        excess = estimate_tokens(item) - budget_tokens
        if excess <= 0:
            break
        sizes = {key: len(_canonical(item[key])) for key in _CUTTABLE if key in item}
        if not sizes:
            break
        key = max(sizes, key=sizes.get)
        if sizes[key] <= MIN_CUT_CHARS:
            break
        text = item[key] if isinstance(item[key], str) else _canonical(item[key])
        keep = max(MIN_CUT_CHARS, len(text) - int(excess * CHARS_PER_TOKEN) - 100)
        item[key] = cut_middle(text, keep)
        cut = True
    return item, cut


@dataclass
class Block:
    items: list[dict] = field(default_factory=list)
    span_ids: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)  # span ids cut to fit
    tokens: int = 0


def pack(spans: list[SpanView], render: Callable[[SpanView, BlockState], dict], *, budget_tokens: int,
         max_items: int) -> list[Block]:
    """Greedy windows in span order: each block's items fit in budget_tokens (an oversize span alone is cut)."""
    blocks: list[Block] = []
    block, state = Block(), BlockState()
    for span in spans:
        trial_state = copy.deepcopy(state)
        item = render(span, trial_state)
        size = estimate_tokens(item) + 1
        if block.items and (block.tokens + size > budget_tokens or len(block.items) >= max_items):
            blocks.append(block)
            block, state = Block(), BlockState()
            trial_state = copy.deepcopy(state)
            item = render(span, trial_state)
            size = estimate_tokens(item) + 1
        if size > budget_tokens:
            item, was_cut = cut_to_fit(item, budget_tokens)
            size = estimate_tokens(item) + 1
            if was_cut:
                block.truncated.append(span.span_id)
        state = trial_state
        block.items.append(item)
        block.span_ids.append(span.span_id)
        block.tokens += size
    if block.items:
        blocks.append(block)
    return blocks
