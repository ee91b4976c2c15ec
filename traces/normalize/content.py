"""Content extraction for OTLP spans: input / output, token usage and cost (used by mapping.build_span_record).

Every function takes the span's plain attribute dict `a` and `hit`, the subset of its keys that any rule here
consults (`KNOWN_KEYS.intersection(a)`, computed once per span), so spans without a given carrier skip its rules with
one set operation instead of dozens of failed dict lookups.
"""

from __future__ import annotations

from typing import Any

from .values import decode_jsonish, to_float, to_int

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


def _first_attr(a: dict, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = a.get(key)
        if value is not None and value != "":
            value = decode_jsonish(value)
            if _present(value):
                return value
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
_EMPTY_IN = ("langfuse.observation.input", "input.value", "input", "traceloop.entity.input")
_EMPTY_OUT = ("langfuse.observation.output", "output.value", "output", "traceloop.entity.output", "final_result")
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
    # A carrier that is present but empty means "the step produced nothing" (a finding), not "not recorded".
    if inp is None and any(a.get(k) == "" for k in _EMPTY_IN):
        inp = ""
    if out is None and any(a.get(k) == "" for k in _EMPTY_OUT):
        out = ""
    return inp, out




# ---------------------------------------------------------------------------------------------------------------
# usage and cost

_IN_KEYS = ("input_tokens", "prompt_tokens", "promptTokens", "inputTokens", "input", "prompt")
_OUT_KEYS = ("output_tokens", "completion_tokens", "completionTokens", "outputTokens", "output", "completion")
_CACHED_KEYS = (
    "cached_tokens",
    "cache_read_input_tokens",
    "input_cached_tokens",
    "input_cache_read",
    "cache_read",
    "cachedContentTokens",
    "cachedInputTokens",
)
# Langfuse bucket keys: its `input` / `output` exclude these, so they are added back (OTel-style inclusive counts)
_LF_INPUT_BUCKETS = ("input_cached_tokens", "input_cache_read", "input_cache_creation", "input_cache_write")
_LF_OUTPUT_BUCKETS = ("output_reasoning", "output_reasoning_tokens", "output_audio", "output_audio_tokens")


def usage_from_mapping(d: dict) -> tuple[int | None, int | None, int | None]:
    """(input, output, cached) from a usage dict in any of the usual shapes: Langfuse usage / usageDetails
    (`input`/`output` + buckets), OpenAI Chat (`prompt_tokens`, `prompt_tokens_details.cached_tokens`), OpenAI
    Responses (`input_tokens`, `input_tokens_details`), Vercel / Genkit camelCase. Keys naming the same count are
    never added together."""
    inp = out = cached = None
    for key in _IN_KEYS:
        if key in d:
            inp = to_int(d[key])
            if inp is not None:
                if key == "input":
                    extra = [to_int(d.get(b)) for b in _LF_INPUT_BUCKETS]
                    inp += sum(x for x in extra if x)
                break
    for key in _OUT_KEYS:
        if key in d:
            out = to_int(d[key])
            if out is not None:
                if key == "output":
                    extra = [to_int(d.get(b)) for b in _LF_OUTPUT_BUCKETS]
                    out += sum(x for x in extra if x)
                break
    for key in _CACHED_KEYS:
        if key in d:
            cached = to_int(d[key])
            if cached is not None:
                break
    if cached is None:
        for key in ("prompt_tokens_details", "input_tokens_details", "promptTokensDetails", "inputTokensDetails"):
            details = d.get(key)
            if isinstance(details, dict):
                cached = to_int(details.get("cached_tokens", details.get("cachedTokens")))
                if cached is not None:
                    break
    return inp, out, cached


_GENERIC_IN = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
)
_GENERIC_OUT = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "llm.usage.completion_tokens",
)
_GENERIC_CACHED = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.prompt_tokens_details.cached_tokens",
    "gen_ai.usage.input_tokens_details.cached_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_AGG_IN = ("gen_ai.aggregated_usage.input_tokens", "gen_ai.aggregated_usage.prompt_tokens")
_AGG_OUT = ("gen_ai.aggregated_usage.output_tokens", "gen_ai.aggregated_usage.completion_tokens")
_AGG_CACHED = ("gen_ai.aggregated_usage.cache_read.input_tokens", "gen_ai.aggregated_usage.cache_read_input_tokens")


def _first_int(a: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = a.get(key)
        if value is not None:
            n = to_int(value)
            if n is not None:
                return n
    return None


_VERCEL_USAGE = ("ai.usage.inputTokens", "ai.usage.promptTokens", "ai.usage.outputTokens", "ai.usage.completionTokens")
USAGE_KEYS = frozenset(
    ("langfuse.observation.usage_details", "genkit:output", *_VERCEL_USAGE)
    + (*_GENERIC_IN, *_GENERIC_OUT, *_AGG_IN, *_AGG_OUT)
)
_NO_USAGE = (None, None, None, False)


def extract_usage(a: dict, hit: set) -> tuple[int | None, int | None, int | None, bool]:
    """(input, output, cached, from_aggregated_keys). Counts as reported; keys naming the same count (e.g.
    `gen_ai.usage.prompt_tokens` and `gen_ai.usage.input_tokens`) are never added together."""
    if not (hit & USAGE_KEYS):
        return _NO_USAGE
    v = a.get("langfuse.observation.usage_details")
    if v is not None:
        d = decode_jsonish(v)
        if isinstance(d, dict):
            inp, out, cached = usage_from_mapping(d)
            if inp is not None or out is not None:
                return inp, out, cached, False
    if "genkit:output" in a and a.get("genkit:metadata:subtype") in ("model", "background-model"):
        d = decode_jsonish(a["genkit:output"])
        usage = d.get("usage") if isinstance(d, dict) else None
        if isinstance(usage, dict):
            inp, out, cached = usage_from_mapping(usage)
            if inp is not None or out is not None:
                return inp, out, cached, False
    inp = _first_int(a, ("ai.usage.inputTokens", "ai.usage.promptTokens"))
    out = _first_int(a, ("ai.usage.outputTokens", "ai.usage.completionTokens"))
    if inp is not None or out is not None:
        return inp, out, _first_int(a, ("ai.usage.cachedInputTokens",)), False
    inp = _first_int(a, _GENERIC_IN)
    out = _first_int(a, _GENERIC_OUT)
    if inp is not None or out is not None:
        return inp, out, _first_int(a, _GENERIC_CACHED), False
    inp = _first_int(a, _AGG_IN)
    out = _first_int(a, _AGG_OUT)
    if inp is not None or out is not None:
        return inp, out, _first_int(a, _AGG_CACHED), True
    return _NO_USAGE


def cost_from_mapping(d: Any) -> float | None:
    """Total cost from a cost-details dict: `total` if present, else the sum of the numeric entries."""
    if not isinstance(d, dict):
        return to_float(d)
    for key in ("total", "totalCost", "total_cost"):
        if key in d:
            total = to_float(d[key])
            if total is not None:
                return total
    values = [to_float(v) for v in d.values()]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


COST_KEYS = frozenset(
    (
        "langfuse.observation.cost_details",
        "gen_ai.usage.cost",
        "llm.cost.total",
        "llm.cost.prompt",
        "llm.cost.completion",
    )
)


def extract_cost(a: dict, hit: set) -> float | None:
    if not (hit & COST_KEYS):
        return None
    v = a.get("langfuse.observation.cost_details")
    if v is not None:
        cost = cost_from_mapping(decode_jsonish(v))
        if cost is not None:
            return cost
    for key in ("gen_ai.usage.cost", "llm.cost.total"):
        v = a.get(key)
        if v is not None:
            cost = to_float(v)
            if cost is not None:
                return cost
    p = to_float(a.get("llm.cost.prompt"))
    c = to_float(a.get("llm.cost.completion"))
    if p is not None or c is not None:
        return (p or 0.0) + (c or 0.0)
    return None


