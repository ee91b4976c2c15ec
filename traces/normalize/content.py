"""Content extraction for OTLP spans: input / output (used by mapping.build_span_record; usage and cost are in
usage.py).

Every function takes the span's plain attribute dict `a` and `hit`, the subset of its keys that any rule here
consults (`KNOWN_KEYS.intersection(a)`, computed once per span), so spans without a given carrier skip its rules with
one set operation instead of dozens of failed dict lookups.
"""

from __future__ import annotations

from typing import Any

from .values import decode_jsonish

# ---------------------------------------------------------------------------------------------------------------
# attribute scan (one pass over the keys)

F_FLAT_PROMPT = 1
F_FLAT_COMPLETION = 2
F_FLAT_OI_IN = 4
F_FLAT_OI_OUT = 8
F_LF_META = 16
F_LF_TRACE_META = 32
F_AI_META = 64
F_REQUEST_PARAMS = 128
F_FLUE_TOOL = 256
F_FLUE_TASK = 512
F_LIVEKIT = 1024

_SCAN_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "langfuse.observation.metadata.",
    "langfuse.trace.metadata.",
    "ai.telemetry.metadata.",
    "gen_ai.request.",
    "flue.",
    "lk.",
)


def scan_flags(a: dict) -> int:
    """One pass over the keys: which prefix-keyed carriers the span has (bit flags F_*)."""
    flags = 0
    for k in a:
        if k.startswith(_SCAN_PREFIXES):
            if k.startswith("gen_ai.request."):  # the most common match first
                flags |= F_REQUEST_PARAMS
            elif k.startswith("gen_ai.prompt."):
                flags |= F_FLAT_PROMPT
            elif k.startswith("gen_ai.completion."):
                flags |= F_FLAT_COMPLETION
            elif k.startswith("llm.input_messages."):
                flags |= F_FLAT_OI_IN
            elif k.startswith("llm.output_messages."):
                flags |= F_FLAT_OI_OUT
            elif k.startswith("langfuse.observation.metadata."):
                flags |= F_LF_META
            elif k.startswith("langfuse.trace.metadata."):
                flags |= F_LF_TRACE_META
            elif k.startswith("ai.telemetry.metadata."):
                flags |= F_AI_META
            elif k.startswith("flue.tool."):
                flags |= F_FLUE_TOOL
            elif k.startswith("flue.task."):
                flags |= F_FLUE_TASK
            elif k.startswith("lk."):
                flags |= F_LIVEKIT
    return flags


_MAX_FLAT_INDEX = 1000  # cap for re-nesting flattened lists (keys like `9999.content` must not blow memory up)


def unflatten(a: dict, prefix: str) -> Any:
    """Re-nest flattened keys under `prefix` (e.g. `gen_ai.prompt.0.role`) into lists / dicts."""
    root: dict = {}
    n = len(prefix)
    for key, value in a.items():
        if not key.startswith(prefix):
            continue
        parts = key[n:].split(".")
        node = root
        ok = True
        for part in parts[:-1]:
            if part.isdigit() and int(part) > _MAX_FLAT_INDEX:
                ok = False
                break
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        if ok and parts[-1]:
            node[parts[-1]] = value
    return _listify(root)


def _listify(node: Any) -> Any:
    if isinstance(node, dict):
        if node and all(k.isdigit() for k in node):
            return [_listify(node[k]) for k in sorted(node, key=int) if int(k) <= _MAX_FLAT_INDEX]
        return {k: _listify(v) for k, v in node.items()}
    return node


def _messages_from_openinference(items: Any) -> Any:
    if isinstance(items, list):
        return [item.get("message", item) if isinstance(item, dict) else item for item in items]
    return items


def _present(value: Any) -> bool:
    return value is not None and value != "" and value != [] and value != {}


# ---------------------------------------------------------------------------------------------------------------
# input / output

# simple attribute carriers, in Langfuse's precedence order (special sources are interleaved in _extract_io)
_IN_A = ("genkit:input", "ai.prompt.messages", "ai.prompt", "ai.toolCall.args")
_OUT_A = ("genkit:output", "ai.response.text", "ai.response.object", "ai.response.toolCalls", "ai.toolCall.result")
_IN_B = (
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.tool_call_args",
    "all_messages_events",
    "mlflow.spanInputs",
    "traceloop.entity.input",
    "input.value",
    "input",
    "pydantic_ai.all_messages",
    "tool_arguments",
)
_OUT_B = (
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_response",
    "mlflow.spanOutputs",
    "traceloop.entity.output",
    "output.value",
    "output",
    "final_result",
    "tool_response",
)

_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _blank(value: Any) -> bool:
    """Text that says nothing: whitespace, or the JSON literal null (`json.dumps(None)` of a turn whose content was
    null, typically one that only called tools)."""
    return isinstance(value, str) and (not value.strip() or value.strip() == "null")


def _first_attr(a: dict, keys: tuple[str, ...]) -> Any:
    # A blank carrier must not hide a later one that holds the content (e.g. `output.value` = "null" next to
    # `gen_ai.output.messages` with the tool calls); _first_blank restores it when nothing else holds a value.
    for key in keys:
        value = a.get(key)
        if value is not None and value != "":
            value = decode_jsonish(value)
            if _present(value) and not _blank(value):
                return value
    return None


def _first_blank(a: dict, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = a.get(key)
        if value is not None and value != "":
            value = decode_jsonish(value)
            if _present(value):
                return value  # only blank carriers are left when this is asked
    return None


def _genai_messages(a: dict, key: str, *, with_system: bool) -> Any:
    value = a.get(key)
    if value is None:
        return None
    value = decode_jsonish(value)
    if not _present(value):
        return None
    if with_system:
        system = a.get("gen_ai.system_instructions")
        if system is not None:
            system = decode_jsonish(system)
            if _present(system) and isinstance(value, list):
                if isinstance(system, list):
                    value = [{"role": "system", "parts": system}, *value]
                else:
                    value = [{"role": "system", "content": system}, *value]
    return value


def _io_from_events(events: list[dict]) -> tuple[Any, Any]:
    """Input/output carried by span events, by Langfuse precedence: inference.operation.details, then the
    deprecated per-message events + gen_ai.choice, then Semantic Kernel's gen_ai.content.prompt/completion."""
    details_in = details_out = None
    msgs: list = []
    choices: list = []
    prompt = completion = None
    for ev in events:
        name = ev["name"]
        if not name.startswith("gen_ai."):
            continue
        ea = ev["attributes"]
        if name == "gen_ai.client.inference.operation.details":
            if details_in is None:
                details_in = _genai_messages(ea, "gen_ai.input.messages", with_system=True)
            if details_out is None:
                details_out = _genai_messages(ea, "gen_ai.output.messages", with_system=False)
        elif name in _ROLE_EVENTS:
            msg = {k: decode_jsonish(v) for k, v in ea.items() if k not in ("gen_ai.system", "gen_ai.provider.name")}
            msg.setdefault("role", _ROLE_EVENTS[name])
            msgs.append(msg)
        elif name == "gen_ai.choice":
            choices.append({k: decode_jsonish(v) for k, v in ea.items()})
        elif name == "gen_ai.content.prompt":
            if prompt is None:
                prompt = decode_jsonish(ea.get("gen_ai.prompt"))
        elif name == "gen_ai.content.completion":
            if completion is None:
                completion = decode_jsonish(ea.get("gen_ai.completion"))
    inp = details_in if _present(details_in) else (msgs or (prompt if _present(prompt) else None))
    if _present(details_out):
        out = details_out
    elif choices:
        out = choices[0] if len(choices) == 1 else choices
    else:
        out = completion if _present(completion) else None
    return inp, out


_IN_LF = frozenset(("langfuse.observation.input", "langfuse.trace.input"))
_OUT_LF = frozenset(("langfuse.observation.output", "langfuse.trace.output"))
_IN_A_SET, _OUT_A_SET = frozenset(_IN_A), frozenset(_OUT_A)
_IN_B_SET, _OUT_B_SET = frozenset(_IN_B), frozenset(_OUT_B)
_IN_C = ("gen_ai.tool.call.arguments", "gen_ai.prompt")
_OUT_C = ("gen_ai.tool.call.result", "gen_ai.completion")
_IN_SIMPLE, _OUT_SIMPLE = _IN_A + _IN_B + _IN_C, _OUT_A + _OUT_B + _OUT_C
_IN_SIMPLE_SET, _OUT_SIMPLE_SET = frozenset(_IN_SIMPLE), frozenset(_OUT_SIMPLE)
# gen_ai.tool.call.*: the GenAI conventions' tool span carriers; "" there is a tool that returned nothing, as
# `output.value` "" is on an OpenInference tool span (tau-airline's `think`, re-encoded: benchmarks/insights_real).
_EMPTY_IN = ("langfuse.observation.input", "input.value", "input", "traceloop.entity.input",
             "gen_ai.tool.call.arguments")
_EMPTY_OUT = ("langfuse.observation.output", "output.value", "output", "traceloop.entity.output", "final_result",
              "gen_ai.tool.call.result")
IO_KEYS = (
    _IN_LF | _OUT_LF | _IN_A_SET | _OUT_A_SET | _IN_B_SET | _OUT_B_SET
    | {"gen_ai.input.messages", "gen_ai.output.messages"} | set(_IN_C) | set(_OUT_C)
)
F_FLAT_ANY = F_FLAT_PROMPT | F_FLAT_COMPLETION | F_FLAT_OI_IN | F_FLAT_OI_OUT


def extract_io(a: dict, hit: set, events: list[dict], *, is_root: bool, flags: int) -> tuple[Any, Any]:
    """(input, output), each from the first carrier in Langfuse's precedence order that holds a value."""
    if not (hit & IO_KEYS) and not events and not flags & F_FLAT_ANY:
        return None, None
    inp = out = None
    if hit & _IN_LF:
        v = a.get("langfuse.observation.input")
        if v is None and is_root:
            v = a.get("langfuse.trace.input")
        if v is not None:
            v = decode_jsonish(v)
            if _present(v):
                inp = v
    if hit & _OUT_LF:
        v = a.get("langfuse.observation.output")
        if v is None and is_root:
            v = a.get("langfuse.trace.output")
        if v is not None:
            v = decode_jsonish(v)
            if _present(v):
                out = v
    if inp is None and hit & _IN_A_SET:
        inp = _first_attr(a, _IN_A)
    if out is None and hit & _OUT_A_SET:
        out = _first_attr(a, _OUT_A)
    if events and (inp is None or out is None):
        ev_in, ev_out = _io_from_events(events)
        if inp is None:
            inp = ev_in
        if out is None:
            out = ev_out
    if inp is None and hit & _IN_B_SET:
        inp = _first_attr(a, _IN_B)
    if out is None and hit & _OUT_B_SET:
        out = _first_attr(a, _OUT_B)
    if flags & F_FLAT_ANY:
        if inp is None and flags & F_FLAT_PROMPT:
            v = unflatten(a, "gen_ai.prompt.")
            if _present(v):
                inp = v
        if out is None and flags & F_FLAT_COMPLETION:
            v = unflatten(a, "gen_ai.completion.")
            if _present(v):
                out = v
        if inp is None and flags & F_FLAT_OI_IN:
            v = _messages_from_openinference(unflatten(a, "llm.input_messages."))
            if _present(v):
                inp = v
        if out is None and flags & F_FLAT_OI_OUT:
            v = _messages_from_openinference(unflatten(a, "llm.output_messages."))
            if _present(v):
                out = v
    if inp is None and "gen_ai.input.messages" in hit:
        inp = _genai_messages(a, "gen_ai.input.messages", with_system=True)
    if out is None and "gen_ai.output.messages" in hit:
        out = _genai_messages(a, "gen_ai.output.messages", with_system=False)
    if inp is None:
        inp = _first_attr(a, _IN_C)
    if out is None:
        out = _first_attr(a, _OUT_C)
    # Only blank carriers hold anything: their text, as sent (whitespace is an empty output, "null" a tool's None).
    if inp is None and hit & _IN_SIMPLE_SET:
        inp = _first_blank(a, _IN_SIMPLE)
    if out is None and hit & _OUT_SIMPLE_SET:
        out = _first_blank(a, _OUT_SIMPLE)
    # A carrier that is present but empty means "the step produced nothing" (a finding), not "not recorded".
    if inp is None and any(a.get(k) == "" for k in _EMPTY_IN):
        inp = ""
    if out is None and any(a.get(k) == "" for k in _EMPTY_OUT):
        out = ""
    return inp, out
