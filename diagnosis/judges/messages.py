"""The conversation a model turn received or wrote, in one shape whatever the instrumentation recorded: a list of
`{"role", "content", "name"}` where `content` is the message's text (a tool result's payload as sent) and `role` is
who spoke — `user`, `assistant`, `system` or `tool`.

The judges of a conversation (rules/writes.py, rules/choices.py) ask who said what before a write. The same run is
recorded in several shapes (text.py lists them for outputs); read as OpenInference's `{"role", "content"}` alone,
the GenAI `parts` format has no text at all and Anthropic's tool results are user messages, so on tau-airline's
runs re-encoded that way (benchmarks/insights_real `--format`) those judges flagged other writes or none:

* OpenAI chat / OpenInference: `{"role", "content": str | [parts], "tool_calls", "name", "tool_call_id"}`.
* GenAI semantic conventions: `{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call_response",
  "response"}]}`.
* Anthropic: `{"role": "user", "content": [{"type": "tool_result", "content"}, {"type": "text", "text"}]}` — the
  results are tool messages, the text after them the user's.
* Vercel AI SDK: `{"role": "tool", "content": [{"type": "tool-result", "toolName", "result" | "output"}]}`.
* Gemini: `{"role": "model" | "user" | "function", "parts": [{"text"}, {"functionResponse": {"name", "response"}}]}`.
* OpenAI Responses items: `{"type": "function_call_output", "output"}` (no role), `{"type": "message", "role",
  "content": [{"type": "input_text", "text"}]}`.

A tool call a message makes is not text it says: it is left out of `content`.
"""

from __future__ import annotations

import json
from typing import Any

from diagnosis.judges.text import maybe_json

USER_ROLES = ("user", "human")
TOOL_ROLES = ("tool", "function", "ipython")
_ROLE_ALIASES = {"model": "assistant", "ai": "assistant", "developer": "system", "human": "user"}
_RESULT_TYPES = frozenset({"tool_result", "tool-result", "tool_call_response", "function_call_output",
                           "function_response", "server_tool_call_response", "mcp_tool_result"})
_RESULT_KEYS = ("content", "output", "result", "response")
_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})


def _text_of(value: Any) -> str:
    """A payload as text: strings as they are, lists of text parts joined, other data as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, (str, dict)) for p in value):
        texts = [t for t in (_part_text(p) for p in value) if t is not None]
        if texts:
            return "\n".join(texts)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _part_text(part: Any) -> str | None:
    """The text one content part says (None for a tool call or a part that says nothing)."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return None
    kind = str(part.get("type") or "")
    if kind and kind not in _TEXT_TYPES:
        return None
    for key in ("text", "content"):
        if isinstance(part.get(key), str):
            return part[key]
    return None


def _result(part: Any) -> tuple[str, str] | None:
    """(tool name, payload text) when a content part is a tool's result."""
    if not isinstance(part, dict):
        return None
    if str(part.get("type") or "") in _RESULT_TYPES:
        payload = next((part[k] for k in _RESULT_KEYS if k in part), None)
        name = part.get("toolName") or part.get("name") or ""
        return str(name), _text_of(payload)
    response = part.get("functionResponse") or part.get("function_response")
    if isinstance(response, dict):
        return str(response.get("name") or ""), _text_of(response.get("response"))
    return None


def _one(message: dict) -> list[dict]:
    role = str(message.get("role") or "").lower()
    if not role and str(message.get("type") or "") in _RESULT_TYPES:
        role = "tool"
    if not role:
        return []
    role = _ROLE_ALIASES.get(role, role)
    name = str(message.get("name") or "")
    parts = message.get("parts") if isinstance(message.get("parts"), list) else message.get("content")
    if not isinstance(parts, list):
        if role in TOOL_ROLES and str(message.get("type") or "") in _RESULT_TYPES:
            return [{"role": "tool", "content": _text_of(message.get("output")), "name": name}]
        return [{"role": role, "content": _text_of(parts), "name": name}]
    out: list[dict] = []
    texts: list[str] = []
    for part in parts:
        result = _result(part)
        if result is not None:
            out.append({"role": "tool", "content": result[1], "name": result[0] or name})
        elif (text := _part_text(part)) is not None:
            texts.append(text)
    if role in TOOL_ROLES:
        return out or [{"role": role, "content": "\n".join(texts), "name": name}]
    if texts or not out:
        # Anthropic puts a user's words after the results they answer in one message: the results came first.
        out.append({"role": role, "content": "\n".join(texts), "name": name})
    return out


def messages_of(value: Any) -> list[dict]:
    """The role-tagged messages of a model turn's input or output (a list of messages, `{"messages": [...]}`, a
    completion's `choices`, one message), each as `{"role", "content": text, "name"}`; [] when it holds none."""
    value = maybe_json(value)
    if isinstance(value, dict):
        if isinstance(value.get("messages"), list):
            value = value["messages"]
        elif isinstance(value.get("choices"), list):
            value = value["choices"]
        else:
            value = [value]
    if not isinstance(value, list):
        return []
    out: list[dict] = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("message"), dict) and not item.get("role"):
            item = item["message"]  # a completion's choice
        if isinstance(item, dict):
            out += _one(item)
    return out
