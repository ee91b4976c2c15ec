"""Successful tool-calling agent runs as OTLP/JSON payloads, in the four formats real agents emit tool calls in.

Each trace is one agent run: a root `invoke_agent` span, one or two model turns that only call tools (1–3 calls,
parallel when more than one, with no text: `content` null or absent), the tool spans, and a final model turn that
answers in text. Nothing in them went wrong, so every rule judge must pass them. Turn shapes vary with the trace's
index so each format covers its carriers:

* `openai_chat`: OpenAI chat messages `{"content": null, "tool_calls": [...]}` in `gen_ai.output.messages`, with
  `output.value` holding the same message, the whole chat completion (`choices[].message`), nothing, or the JSON
  literal null; or the completion's choices themselves in `gen_ai.output.messages`.
* `genai_parts`: GenAI semantic-convention `parts` of type `tool_call` (sometimes after an empty text part).
* `openinference`: flattened `llm.output_messages.0.message.tool_calls.M.tool_call.function.name/arguments`,
  alone or with `output.value` holding the chat completion.
* `anthropic`: `content` blocks of type `tool_use` (alone, after text, after an empty text block), or the whole
  Messages API response with `stop_reason: tool_use` in `output.value`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FORMATS = ("openai_chat", "genai_parts", "openinference", "anthropic")
TRACES_PER_FORMAT = 20
_T0_NS = 1_740_830_400_000_000_000  # 2025-03-01T12:00:00Z
_MS = 1_000_000

_TOOLS: tuple[tuple[str, dict, dict], ...] = (
    ("get_weather", {"city": "Paris"}, {"city": "Paris", "temperature_c": 18, "sky": "cloudy"}),
    ("search_docs", {"query": "reset password"}, {"hits": [{"title": "Resetting your password", "id": "kb-12"}]}),
    ("get_order", {"order_id": "O-1042"}, {"order_id": "O-1042", "status": "shipped", "total": 42.5}),
    ("convert_currency", {"amount": 100, "from": "EUR", "to": "USD"}, {"amount": 108.3, "currency": "USD"}),
    ("lookup_user", {"email": "ann@example.com"}, {"user_id": "U-7", "plan": "pro"}),
)

TOOL_NAMES = tuple(name for name, _, _ in _TOOLS)


def _hex(*parts: object, size: int) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:size]


def _value(value: Any) -> dict:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": value if isinstance(value, str) else json.dumps(value)}


def _span(trace_id: str, span_id: str, parent: str, name: str, start_ms: float, duration_ms: float,
          attributes: dict, *, kind: int = 1) -> dict:
    start = _T0_NS + int(start_ms * _MS)
    return {
        "traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": kind,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + int(duration_ms * _MS)),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attributes.items() if v is not None],
        "status": {"code": 1},
    }


def _plan(index: int) -> list[list[tuple[str, str, dict, dict]]]:
    """Rounds of tool calls (call id, tool, arguments, result): 1–2 rounds of 1–3 calls, arguments unique."""
    rounds = []
    for r in range(1 + (index // 3) % 2):
        calls = []
        for c in range((index + r) % 3 + 1):
            name, arguments, result = _TOOLS[(index + 2 * r + c) % len(_TOOLS)]
            arguments = {**arguments, "request": f"t{index}-r{r}-c{c}"}
            calls.append((f"call_{_hex(index, r, c, size=12)}", name, arguments, result))
        rounds.append(calls)
    return rounds


# ---------------------------------------------------------------------------------------------------------------
# one model turn's attributes per format


def _openai_turn(index: int, calls: list, answer: str | None, model: str) -> dict:
    if answer is None:
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args, _ in calls]}
        reason = "tool_calls"
    else:
        message, reason = {"role": "assistant", "content": answer}, "stop"
    choice = {"index": 0, "message": message, "finish_reason": reason, "logprobs": None}
    completion = {"id": f"chatcmpl-{_hex(index, answer, size=10)}", "object": "chat.completion", "model": model,
                  "choices": [choice], "usage": {"prompt_tokens": 120, "completion_tokens": 30}}
    attributes = {"gen_ai.response.finish_reasons": [reason], "gen_ai.output.messages": json.dumps([message])}
    variant = index % 5
    if variant == 0:
        attributes["output.value"] = json.dumps(message)
    elif variant == 1:
        attributes["output.value"] = json.dumps(completion)
    elif variant == 2:
        attributes["gen_ai.output.messages"] = json.dumps([choice])
    elif variant == 3:
        attributes["output.value"] = json.dumps(message["content"])  # "null" on a tool-call turn
    return attributes


def _parts_turn(index: int, calls: list, answer: str | None, model: str) -> dict:
    if answer is None:
        parts = [{"type": "tool_call", "id": cid, "name": name, "arguments": args} for cid, name, args, _ in calls]
        if index % 2:
            parts.insert(0, {"type": "text", "content": ""})
        message = {"role": "assistant", "parts": parts, "finish_reason": "tool_call"}
    else:
        message = {"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}
    return {"gen_ai.output.messages": json.dumps([message]),
            "gen_ai.response.finish_reasons": [message["finish_reason"]]}


def _openinference_turn(index: int, calls: list, answer: str | None, model: str) -> dict:
    prefix = "llm.output_messages.0.message."
    attributes: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": model,
                                  f"{prefix}role": "assistant"}
    if answer is None:
        for m, (cid, name, args, _) in enumerate(calls):
            call = f"{prefix}tool_calls.{m}.tool_call."
            attributes |= {f"{call}id": cid, f"{call}function.name": name,
                           f"{call}function.arguments": json.dumps(args)}
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args, _ in calls]}
        reason = "tool_calls"
    else:
        attributes[f"{prefix}content"] = answer
        message, reason = {"role": "assistant", "content": answer}, "stop"
    if index % 2:  # the instrumentor's whole response next to the flattened messages
        attributes["output.value"] = json.dumps({"id": f"chatcmpl-{_hex(index, answer, size=10)}", "model": model,
                                                 "choices": [{"index": 0, "message": message,
                                                              "finish_reason": reason}]})
        attributes["output.mime_type"] = "application/json"
    return attributes


def _anthropic_turn(index: int, calls: list, answer: str | None, model: str) -> dict:
    if answer is None:
        blocks = [{"type": "tool_use", "id": f"toolu_{cid[5:]}", "name": name, "input": args}
                  for cid, name, args, _ in calls]
        variant = index % 4
        if variant == 1:
            blocks.insert(0, {"type": "text", "text": "Let me look that up."})
        elif variant == 2:
            blocks.insert(0, {"type": "text", "text": ""})
        reason = "tool_use"
    else:
        blocks, reason, variant = [{"type": "text", "text": answer}], "end_turn", index % 4
    message = {"role": "assistant", "content": blocks}
    attributes = {"gen_ai.system": "anthropic", "gen_ai.response.finish_reasons": [reason]}
    if variant == 3:
        attributes["output.value"] = json.dumps({
            "id": f"msg_{_hex(index, answer, size=10)}", "type": "message", "model": model, **message,
            "stop_reason": reason, "stop_sequence": None, "usage": {"input_tokens": 120, "output_tokens": 30}})
    else:
        attributes["gen_ai.output.messages"] = json.dumps([message])
    return attributes


_TURNS = {"openai_chat": _openai_turn, "genai_parts": _parts_turn, "openinference": _openinference_turn,
          "anthropic": _anthropic_turn}
_MODELS = {"openai_chat": "gpt-4o-mini", "genai_parts": "gpt-4o-mini", "openinference": "gpt-4o",
           "anthropic": "claude-3-5-sonnet-20241022"}


def _tool_attributes(fmt: str, cid: str, name: str, args: dict, result: dict) -> dict:
    if fmt == "openinference":
        return {"openinference.span.kind": "TOOL", "tool.name": name, "input.value": json.dumps(args),
                "output.value": json.dumps(result), "output.mime_type": "application/json"}
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": cid,
            "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": json.dumps(result)}


def tool_calling_trace(*, fmt: str, index: int) -> dict:
    """One successful run (see the module docstring) as an OTLP/JSON ExportTraceServiceRequest."""
    trace_id, root_id = _hex(fmt, index, size=32), _hex(fmt, index, "root", size=16)
    model = _MODELS[fmt]
    question = f"Request {index}: please check my order, the weather and my account."
    answer = f"All done for request {index}: your order has shipped and the weather in Paris is cloudy."
    spans, at = [], 10.0
    rounds = _plan(index)
    for r, calls in enumerate([*rounds, []]):
        final = r == len(rounds)
        chat = _span(trace_id, _hex(fmt, index, "chat", r, size=16), root_id, f"chat {model}", at,
                     700 + 10 * (index % 5), {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                      "gen_ai.usage.input_tokens": 100 + 40 * r + index % 7, "gen_ai.usage.output_tokens": 30,
                      **_TURNS[fmt](index, calls, answer if final else None, model)})
        spans.append(chat)
        at += 720
        for c, (cid, name, args, result) in enumerate(calls):  # parallel calls start together
            spans.append(_span(trace_id, _hex(fmt, index, "tool", r, c, size=16), root_id, f"execute_tool {name}",
                               at, 200 + 10 * c, _tool_attributes(fmt, cid, name, args, result)))
        at += 260 if calls else 0
    root_attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "assistant",
                       "clear.task.id": f"{fmt}-{index}", "clear.outcome": "success"}
    if fmt == "openinference":
        root_attributes |= {"openinference.span.kind": "AGENT", "input.value": question, "output.value": answer}
    else:
        root_attributes |= {
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": question}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": answer}])}
    root = _span(trace_id, root_id, "", "invoke_agent assistant", 0, at + 10, root_attributes)
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": f"agent-{fmt}"}},
                               {"key": "service.version", "value": {"stringValue": fmt}}]}
    return {"resourceSpans": [{"resource": resource,
                               "scopeSpans": [{"scope": {"name": f"tests.formats.{fmt}"}, "spans": [root, *spans]}]}]}


def tool_calling_payloads(*, fmt: str, count: int = TRACES_PER_FORMAT) -> list[bytes]:
    """`count` successful runs in one format, each an OTLP/JSON request body."""
    return [json.dumps(tool_calling_trace(fmt=fmt, index=i)).encode() for i in range(count)]


def tool_call_turns(*, fmt: str, count: int = TRACES_PER_FORMAT) -> int:
    """How many model turns in the payloads only call tools (no text)."""
    return sum(len(_plan(i)) for i in range(count))
