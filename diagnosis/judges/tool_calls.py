"""Which spans are tool calls, when the instrumentation did not say. The Langfuse SDK's `@observe()` records a tool
function as a plain `span` observation (only `as_type="tool"` makes it a tool), and a hand-instrumented agent often
does the same: every judge of tool calls (errors, repeats, writes) then saw none. tau-airline's runs re-encoded that
way (tools as Langfuse `span` observations, model turns as `generation`s) gave coverage 5.6% and no real ticket on
the tune split with one run per task, against 55.5% as recorded.

A span is taken for a tool call when the trace has no TOOL span at all, its kind says nothing (SPAN, CHAIN), no model
turn or agent runs under it, and a model turn that started before it called a tool of its name; its node is then
that turn's agent. The stored span keeps its kind and node (pages show what was sent); the judges see a TOOL span.
"""

from __future__ import annotations

from typing import Any

from diagnosis.judges.contract import SpanView
from diagnosis.judges.text import maybe_json

_UNTYPED = frozenset({"SPAN", "CHAIN"})
_CALL_TYPES = frozenset({"tool_call", "tool_use", "function_call", "server_tool_use"})


def called_tool_names(value: Any, depth: int = 0) -> set[str]:
    """The names of the tools a model turn's output calls, in any format: OpenAI `tool_calls[].function.name` (and
    OpenInference's `tool_call.function.name`), GenAI `parts` and Anthropic blocks of a call type, Gemini
    `functionCall`, Responses API `function_call` items."""
    names: set[str] = set()
    if depth > 20:
        return names
    value = maybe_json(value)
    if isinstance(value, list):
        for item in value:
            names |= called_tool_names(item, depth + 1)
    elif isinstance(value, dict):
        function = value.get("function") or value.get("functionCall") or value.get("function_call")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
        if str(value.get("type") or "") in _CALL_TYPES and isinstance(value.get("name"), str):
            names.add(value["name"])
        for child in value.values():
            if isinstance(child, (dict, list, str)):
                names |= called_tool_names(child, depth + 1)
    return names


def tool_spans_infer(spans: list[SpanView]) -> None:
    """Mark as TOOL (in these views only) the untyped spans that are a model's tool calls (module docstring).
    `spans` in start order."""
    if any(span.kind == "TOOL" for span in spans):
        return
    runs_model = {span.parent_span_id for span in spans if span.kind in ("LLM", "AGENT")}
    caller: dict[str, SpanView] = {}  # tool name -> the latest model turn that called it
    for span in spans:
        if span.kind == "LLM":
            caller |= {name: span for name in called_tool_names(span.output)}
        elif span.kind in _UNTYPED and span.name in caller and span.span_id not in runs_model:
            span.kind, span.tool_name = "TOOL", span.tool_name or span.name
            # The call is the calling agent's (an untyped span's node is often its own name).
            span.node = caller[span.name].node or span.node
