"""tau-airline's runs as other instrumentations would have recorded them (`--format`): the same conversation, span
ids, times and statuses, with OpenInference's attributes replaced by another shape. What a judge says about a run
must not depend on which SDK recorded it; measured on the same runs, the figures must be the same.

* `genai_parts`: GenAI semantic conventions — `gen_ai.input.messages` / `gen_ai.output.messages` in the `parts`
  format (`text`, `tool_call`, `tool_call_response`), the system prompt in `gen_ai.system_instructions`, tool spans
  `execute_tool` with `gen_ai.tool.call.arguments` / `.result`, the root `invoke_agent` (OpenLIT, Pydantic AI,
  the OpenTelemetry GenAI instrumentations).
* `anthropic`: the same carriers holding Anthropic Messages API content blocks: `tool_use` in the assistant's
  messages, a tool's reply as a `tool_result` block of a *user* message.
* `openai_chat`: the same carriers holding OpenAI chat messages (`tool_calls`, `role: tool` replies), as the Langfuse
  SDK's OpenAI integration and OpenLLMetry record them.
* `langfuse_spans`: the Langfuse SDK's `@observe()`: model turns are `generation` observations holding OpenAI chat
  messages, and tools and the agent are plain `span` observations named after the function (nothing says a tool is
  a tool: diagnosis/judges/tool_calls.py infers it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

FORMATS = ("genai_parts", "anthropic", "openai_chat", "langfuse_spans")
_INDEXED = re.compile(r"(\d+)\.message\.(.*)")
_CALL = re.compile(r"tool_calls\.(\d+)\.tool_call\.(.*)")


def _value(value: dict) -> Any:
    return next(iter(value.values()), None) if value else None


def _messages(attributes: dict, prefix: str) -> list[dict]:
    """OpenInference's flattened `llm.input_messages.N.message.*` as {role, content, name, tool_call_id, calls}."""
    by_index: dict[int, dict] = {}
    for key, value in attributes.items():
        if key.startswith(prefix) and (match := _INDEXED.match(key[len(prefix):])):
            by_index.setdefault(int(match.group(1)), {})[match.group(2)] = value
    messages = []
    for index in sorted(by_index):
        fields = by_index[index]
        calls: dict[int, dict] = {}
        for key, value in fields.items():
            if match := _CALL.match(key):
                calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
        messages.append({"role": fields.get("role"), "content": fields.get("content"), "name": fields.get("name"),
                         "tool_call_id": fields.get("tool_call_id"),
                         "calls": [calls[i] for i in sorted(calls)]})
    return messages


def _arguments(call: dict) -> Any:
    try:
        return json.loads(call.get("function.arguments") or "{}")
    except ValueError:
        return call.get("function.arguments")


def _parts_message(message: dict) -> dict:
    if message["role"] == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message["tool_call_id"],
                                           "response": message["content"]}]}
    parts: list[dict] = [{"type": "text", "content": message["content"]}] if message["content"] else []
    parts += [{"type": "tool_call", "id": c.get("id"), "name": c.get("function.name"), "arguments": _arguments(c)}
              for c in message["calls"]]
    out = {"role": message["role"], "parts": parts}
    if message["role"] == "assistant":
        out["finish_reason"] = "tool_call" if message["calls"] else "stop"
    return out


def _anthropic_message(message: dict) -> dict:
    if message["role"] == "tool":
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": message["tool_call_id"],
                                             "content": message["content"]}]}
    if message["role"] == "system":
        return {"role": "system", "content": message["content"]}
    blocks: list[dict] = [{"type": "text", "text": message["content"]}] if message["content"] else []
    blocks += [{"type": "tool_use", "id": c.get("id"), "name": c.get("function.name"), "input": _arguments(c)}
               for c in message["calls"]]
    return {"role": message["role"], "content": blocks}


def _openai_message(message: dict) -> dict:
    out: dict = {"role": message["role"], "content": message["content"]}
    if message["role"] == "tool":
        out["tool_call_id"] = message["tool_call_id"]
    if message["calls"]:
        out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                              "function": {"name": c.get("function.name"), "arguments": c.get("function.arguments")}}
                             for c in message["calls"]]
    return out


_WRITERS = {"genai_parts": _parts_message, "anthropic": _anthropic_message, "openai_chat": _openai_message}


def _attribute(key: str, value: Any) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value if isinstance(value, str) else json.dumps(value)}}


def _langfuse_span(span: dict, attributes: dict, kind: str | None, kept: dict) -> dict:
    if kind == "LLM":
        kept |= {"langfuse.observation.type": "generation", "langfuse.observation.model.name":
                 attributes.get("llm.model_name"),
                 "langfuse.observation.input": json.dumps([_openai_message(m) for m in
                                                           _messages(attributes, "llm.input_messages.")]),
                 "langfuse.observation.output": json.dumps([_openai_message(m) for m in
                                                            _messages(attributes, "llm.output_messages.")][:1])}
        name = "OpenAI-generation"
    elif kind in ("TOOL", "AGENT"):
        name = attributes.get("tool.name" if kind == "TOOL" else "agent.name") or span.get("name")
        kept |= {"langfuse.observation.type": "span", "langfuse.observation.input": attributes.get("input.value"),
                 "langfuse.observation.output": attributes.get("output.value")}
    else:
        return span
    return {**span, "name": name, "attributes": [_attribute(k, v) for k, v in kept.items() if v is not None]}


def reencode_span(span: dict, fmt: str) -> dict:
    """One OpenInference span in `fmt`; spans of other kinds unchanged."""
    attributes = {a["key"]: _value(a.get("value") or {}) for a in span.get("attributes") or []}
    kind = attributes.get("openinference.span.kind")
    kept = {k: v for k, v in attributes.items() if k.startswith("clear.") or k == "session.id"}
    if fmt == "langfuse_spans":
        return _langfuse_span(span, attributes, kind, kept)
    if kind == "LLM":
        write = _WRITERS[fmt]
        inputs = _messages(attributes, "llm.input_messages.")
        system = [m for m in inputs if m["role"] == "system"] if fmt == "genai_parts" else []
        model = attributes.get("llm.model_name")
        kept |= {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                 "gen_ai.provider.name": "anthropic" if fmt == "anthropic" else "openai",
                 "gen_ai.input.messages": json.dumps([write(m) for m in inputs if m not in system]),
                 "gen_ai.output.messages": json.dumps([write(m) for m in _messages(attributes,
                                                                                    "llm.output_messages.")])}
        if system:
            kept["gen_ai.system_instructions"] = json.dumps([{"type": "text", "content": system[0]["content"]}])
        name = f"chat {model}"
    elif kind == "TOOL":
        tool = attributes.get("tool.name") or span.get("name")
        kept |= {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                 "gen_ai.tool.call.arguments": attributes.get("input.value") or attributes.get("tool.parameters"),
                 "gen_ai.tool.call.result": attributes.get("output.value")}
        name = f"execute_tool {tool}"
    elif kind == "AGENT":
        agent = attributes.get("agent.name") or span.get("name")
        kept |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                 "gen_ai.input.messages": json.dumps([{"role": "user", "content": attributes.get("input.value")}]),
                 "gen_ai.output.messages": json.dumps([{"role": "assistant",
                                                        "content": attributes.get("output.value")}])}
        name = f"invoke_agent {agent}"
    else:
        return span
    return {**span, "name": name, "attributes": [_attribute(k, v) for k, v in kept.items() if v is not None]}


def reencode(request: dict, fmt: str) -> dict:
    """An OTLP/JSON ExportTraceServiceRequest of OpenInference spans, re-encoded in `fmt`."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return {**request, "resourceSpans": [
        {**resource, "scopeSpans": [
            {**scope, "scope": {"name": f"benchmarks.insights_real.formats.{fmt}"},
             "spans": [reencode_span(span, fmt) for span in scope.get("spans") or []]}
            for scope in resource.get("scopeSpans") or []]}
        for resource in request.get("resourceSpans") or []]}


def reencode_file(*, source: Path, target: Path, fmt: str) -> None:
    target.write_text(json.dumps(reencode(json.loads(source.read_text()), fmt)))
