"""Attribute mapping: one decoded OTLP span (plain attribute dict) -> SpanRecord.

Precedence follows Langfuse's OTel mapping (research/observability.md §4.3) with the exceptions listed in
MAPPING.md (next to this file), which also documents every choice made where the otel-samples `expect.json`
files mark a field as ambiguous. Summary:

* kind: Langfuse observation type -> OpenInference span kind -> GenAI `gen_ai.operation.name` -> Genkit subtype ->
  Vercel `ai.*.do*` / `ai.toolCall` -> `gen_ai.tool.*` -> Flue -> LiveKit -> vendor kinds (`mlflow.spanType`,
  `traceloop.span.kind`, `llm.request.type`, `langwatch.span.type`, `langsmith.span.kind`, Vercel outer `ai.*`) ->
  any model attribute => LLM -> small heuristics -> SPAN. `gen_ai.agent.name` never makes a span an AGENT.
* node: AGENT spans name themselves; LLM / TOOL spans take the agent name they carry (the owning agent);
  evaluator / annotation spans name themselves (they judge a run, they are not a step of it); others resolve
  later from the nearest AGENT ancestor (nodes.resolve_nodes), else `node_fallback` = carried agent name, else
  tool name, else the span name with ids / numbers / uuids stripped.
* tokens are the counts as reported (OTel semantics: input includes cache reads, output includes reasoning);
  `usage_is_aggregate` marks spans whose usage re-reports their children's.

Everything here is pure Python and cheap: dict lookups, one pass over the attribute keys, no regex per attribute.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from .records import SpanRecord
from .values import datetime_to_iso, decode_jsonish, ns_to_datetime, parse_iso_datetime, to_float, to_int

# ---------------------------------------------------------------------------------------------------------------
# kinds

LANGFUSE_TYPE_TO_KIND = {
    "span": "SPAN",
    "generation": "LLM",
    "event": "EVENT",
    "embedding": "EMBEDDING",
    "agent": "AGENT",
    "tool": "TOOL",
    "chain": "CHAIN",
    "retriever": "RETRIEVER",
    "guardrail": "GUARDRAIL",
    "evaluator": "EVALUATOR",
}

_OPENINFERENCE_KINDS = {
    "LLM": "LLM",
    "CHAIN": "CHAIN",
    "RETRIEVER": "RETRIEVER",
    "RERANKER": "RETRIEVER",  # no reranker kind in our vocabulary; a reranker is part of retrieval
    "EMBEDDING": "EMBEDDING",
    "AGENT": "AGENT",
    "TOOL": "TOOL",
    "GUARDRAIL": "GUARDRAIL",
    "EVALUATOR": "EVALUATOR",
    # PROMPT (template formatting) is not mapped: later rules decide.
}

_GENAI_OPERATIONS = {
    "chat": "LLM",
    "completion": "LLM",
    "text_completion": "LLM",
    "generate_content": "LLM",
    "generate": "LLM",
    "embeddings": "EMBEDDING",
    "embedding": "EMBEDDING",
    "invoke_agent": "AGENT",
    "create_agent": "AGENT",
    "execute_tool": "TOOL",
    # Semconv operations Langfuse does not map (it falls back to SPAN); the payload names its own kind.
    "retrieval": "RETRIEVER",
    "invoke_workflow": "CHAIN",
}

_GENKIT_SUBTYPES = {
    "model": "LLM",
    "background-model": "LLM",
    "embedder": "EMBEDDING",
    "tool": "TOOL",
    "tool.v2": "TOOL",
    "retriever": "RETRIEVER",
    "evaluator": "EVALUATOR",
}

_VERCEL_EXPLICIT = {
    "ai.generateText.doGenerate": "LLM",
    "ai.streamText.doStream": "LLM",
    "ai.generateObject.doGenerate": "LLM",
    "ai.streamObject.doStream": "LLM",
    "ai.embed.doEmbed": "EMBEDDING",
    "ai.embedMany.doEmbed": "EMBEDDING",
    "ai.toolCall": "TOOL",
}
# OpenInference's Vercel map for the outer (non do*) operations
_VERCEL_VENDOR = {
    "ai.generateText": "CHAIN",
    "ai.streamText": "CHAIN",
    "ai.generateObject": "CHAIN",
    "ai.streamObject": "CHAIN",
    "ai.embed": "CHAIN",
    "ai.embedMany": "CHAIN",
}

_MLFLOW_TYPES = {
    "LLM": "LLM",
    "CHAT_MODEL": "LLM",
    "CHAIN": "CHAIN",
    "AGENT": "AGENT",
    "TOOL": "TOOL",
    "RETRIEVER": "RETRIEVER",
    "RERANKER": "RETRIEVER",
    "EMBEDDING": "EMBEDDING",
    "GUARDRAIL": "GUARDRAIL",
    "EVALUATOR": "EVALUATOR",
}
_TRACELOOP_KINDS = {"workflow": "CHAIN", "task": "CHAIN", "agent": "AGENT", "tool": "TOOL"}
_LLM_REQUEST_TYPES = {"chat": "LLM", "completion": "LLM", "embedding": "EMBEDDING", "rerank": "RETRIEVER"}
_LANGWATCH_TYPES = {
    "llm": "LLM",
    "chain": "CHAIN",
    "workflow": "CHAIN",
    "task": "CHAIN",
    "component": "CHAIN",
    "module": "CHAIN",
    "tool": "TOOL",
    "agent": "AGENT",
    "rag": "RETRIEVER",
    "guardrail": "GUARDRAIL",
    "evaluation": "EVALUATOR",
}
_LANGSMITH_KINDS = {
    "llm": "LLM",
    "chain": "CHAIN",
    "tool": "TOOL",
    "retriever": "RETRIEVER",
    "embedding": "EMBEDDING",
    "prompt": "CHAIN",
    "parser": "CHAIN",
}

# Langfuse extractModelName() order (P10 uses the same set: any of them present => LLM)
_MODEL_KEYS = (
    "langfuse.observation.model.name",
    "gen_ai.response.model",
    "ai.model.id",
    "gen_ai.request.model",
    "llm.response.model",
    "llm.model_name",
    "model",
)
# Vendor model attributes Langfuse does not read (used for `model`, never for the kind)
_MODEL_FALLBACK_KEYS = ("mlflow.llm.model", "model_name", "llm.request.model", "embedding.model_name")

_AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name", "agent_name")
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "ai.toolCall.name")

_ERROR_LEVELS = {"ERROR", "FATAL", "CRITICAL"}


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
        return value or None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return str(value)
    return None


def _first_str(a: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = a.get(key)
        if value is not None:
            s = _str(value)
            if s:
                return s
    return None


def _vendor_value(value: Any) -> str | None:
    """A vendor kind value, possibly JSON-encoded (MLflow stores '"LLM"')."""
    if not isinstance(value, str):
        return None
    value = decode_jsonish(value)
    return value.strip() if isinstance(value, str) else None


def classify_kind(a: dict, name: str, scope: str, flags: int = 0) -> str:
    """The span kind, first matching rule wins (see module docstring). `flags` come from `_scan`."""
    v = a.get("langfuse.observation.type")
    if isinstance(v, str):
        kind = LANGFUSE_TYPE_TO_KIND.get(v.strip().lower())
        if kind is not None:
            # P0: Langfuse Python SDK <= 3.3 marked generations as "span" but set generation attributes
            if kind == "SPAN" and (
                "langfuse.observation.model.name" in a
                or "langfuse.observation.usage_details" in a
                or "langfuse.observation.cost_details" in a
            ):
                return "LLM"
            return kind
    v = a.get("openinference.span.kind")
    if isinstance(v, str):
        kind = _OPENINFERENCE_KINDS.get(v.strip().upper())
        if kind is not None:
            return kind
    v = a.get("gen_ai.operation.name")
    if isinstance(v, str):
        kind = _GENAI_OPERATIONS.get(v.strip().lower())
        if kind is not None:
            return kind
    v = a.get("genkit:metadata:subtype")
    if isinstance(v, str):
        kind = _GENKIT_SUBTYPES.get(v.strip())
        if kind is not None:
            return kind
    opid = a.get("ai.operationId")
    if not isinstance(opid, str):
        opname = a.get("operation.name")
        opid = opname.split(" ", 1)[0] if isinstance(opname, str) else None
    if opid:
        kind = _VERCEL_EXPLICIT.get(opid)
        if kind is not None:
            return kind
    if "gen_ai.tool.name" in a or "gen_ai.tool.call.id" in a:
        return "TOOL"
    if flags & _F_FLUE_TOOL:
        return "TOOL"
    if flags & _F_FLUE_TASK:
        return "AGENT"
    if name in ("agent_turn", "start_agent_activity", "function_tool") and (
        flags & _F_LIVEKIT or "livekit" in scope.lower()
    ):
        return "TOOL" if name == "function_tool" else "AGENT"
    # vendor kinds Langfuse ignores
    v = _vendor_value(a.get("mlflow.spanType"))
    if v and v.upper() in _MLFLOW_TYPES:
        return _MLFLOW_TYPES[v.upper()]
    v = a.get("traceloop.span.kind")
    if isinstance(v, str) and v.strip().lower() in _TRACELOOP_KINDS:
        return _TRACELOOP_KINDS[v.strip().lower()]
    v = a.get("llm.request.type")
    if isinstance(v, str) and v.strip().lower() in _LLM_REQUEST_TYPES:
        return _LLM_REQUEST_TYPES[v.strip().lower()]
    v = a.get("langwatch.span.type")
    if isinstance(v, str) and v.strip().lower() in _LANGWATCH_TYPES:
        return _LANGWATCH_TYPES[v.strip().lower()]
    v = a.get("langsmith.span.kind")
    if isinstance(v, str) and v.strip().lower() in _LANGSMITH_KINDS:
        return _LANGSMITH_KINDS[v.strip().lower()]
    if opid and opid in _VERCEL_VENDOR:
        return _VERCEL_VENDOR[opid]
    # P10: any model attribute
    for key in _MODEL_KEYS:
        if key in a:
            return "LLM"
    # heuristics
    if "tool.name" in a or "ai.toolCall.name" in a:
        return "TOOL"
    if flags & _F_FLAT_PROMPT or "llm.input_messages.0.message.role" in a or "llm.input_messages.0.message.content" in a:
        return "LLM"
    if "embedding.model_name" in a:
        return "EMBEDDING"
    if "retrieval.documents.0.document.content" in a or "retrieval.documents.0.document.id" in a:
        return "RETRIEVER"
    return "SPAN"


# ---------------------------------------------------------------------------------------------------------------
# names

_SEPS = "-_:./#=@"
_ID_SEGMENT = re.compile(
    r"(?:(?<=[\s\-_:./#=@,()\[\]])|^)"
    r"(?:[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"  # uuid
    r"|(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{8,}"  # hex id with at least one digit
    r"|\d{3,}"  # number of 3+ digits
    r")(?=[\s\-_:./#=@,()\[\]]|$)"
)
_LONE_NUMBER = re.compile(r"(?:(?<=\s)|^)#?\d+(?=\s|$)")
_DUP_SEPS = re.compile(r"([\-_:./#=@])[\-_:./#=@]+")
_DANGLING = re.compile(r"[\-_:./#=@,]+(?=\s|$)")
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=8192)
def normalize_name(name: str) -> str:
    """A span name with ids stripped, for use as a node name: uuids, hex ids (8+ hex digits with a digit), numbers
    of 3+ digits inside a name and whitespace-separated numbers go; `chat gpt-4o` stays, `task-1234` -> `task`,
    `GET /users/12345/orders` -> `GET /users/orders`, `step 3` -> `step`."""
    s = name.strip()
    if not s:
        return "span"
    if not any(c.isdigit() for c in s):
        return s
    out = _ID_SEGMENT.sub("", s)
    out = _LONE_NUMBER.sub("", out)
    if out != s:
        out = _DUP_SEPS.sub(r"\1", out)
        out = _DANGLING.sub("", out)
        out = _SPACES.sub(" ", out).strip().strip(_SEPS + ", ").strip()
    return out or s


def _agent_from_span_name(name: str) -> str | None:
    for prefix in ("invoke_agent ", "create_agent "):
        if name.startswith(prefix):
            rest = name[len(prefix):].strip()
            return rest or None
    return None


def _tool_from_span_name(name: str) -> str | None:
    if name.startswith("execute_tool "):
        rest = name[len("execute_tool "):].strip()
        return rest or None
    return None


def node_fields(
    *, kind: str, name: str, agent_name: str | None, tool_name: str | None, self_named: bool = False
) -> tuple[str | None, str]:
    """(node, node_fallback) decidable from the span alone. See the module docstring."""
    if kind == "AGENT":
        node = agent_name or _agent_from_span_name(name) or normalize_name(name)
        return node, node
    fallback = agent_name or tool_name or normalize_name(name)
    if kind in ("LLM", "TOOL"):
        return agent_name, fallback
    if kind == "EVALUATOR" or self_named:
        own = tool_name or normalize_name(name)
        return own, own
    return None, fallback


# ---------------------------------------------------------------------------------------------------------------
# attribute scan (one pass over the keys)

_F_FLAT_PROMPT = 1
_F_FLAT_COMPLETION = 2
_F_FLAT_OI_IN = 4
_F_FLAT_OI_OUT = 8
_F_LF_META = 16
_F_LF_TRACE_META = 32
_F_AI_META = 64
_F_REQUEST_PARAMS = 128
_F_FLUE_TOOL = 256
_F_FLUE_TASK = 512
_F_LIVEKIT = 1024

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


def _scan(a: dict) -> int:
    flags = 0
    for k in a:
        if k.startswith(_SCAN_PREFIXES):
            if k.startswith("gen_ai.prompt."):
                flags |= _F_FLAT_PROMPT
            elif k.startswith("gen_ai.completion."):
                flags |= _F_FLAT_COMPLETION
            elif k.startswith("llm.input_messages."):
                flags |= _F_FLAT_OI_IN
            elif k.startswith("llm.output_messages."):
                flags |= _F_FLAT_OI_OUT
            elif k.startswith("langfuse.observation.metadata."):
                flags |= _F_LF_META
            elif k.startswith("langfuse.trace.metadata."):
                flags |= _F_LF_TRACE_META
            elif k.startswith("ai.telemetry.metadata."):
                flags |= _F_AI_META
            elif k.startswith("gen_ai.request."):
                flags |= _F_REQUEST_PARAMS
            elif k.startswith("flue.tool."):
                flags |= _F_FLUE_TOOL
            elif k.startswith("flue.task."):
                flags |= _F_FLUE_TASK
            elif k.startswith("lk."):
                flags |= _F_LIVEKIT
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


def extract_io(a: dict, events: list[dict], *, is_root: bool, flags: int) -> tuple[Any, Any]:
    inp = out = None
    v = a.get("langfuse.observation.input")
    if v is None and is_root:
        v = a.get("langfuse.trace.input")
    if v is not None:
        v = decode_jsonish(v)
        if _present(v):
            inp = v
    v = a.get("langfuse.observation.output")
    if v is None and is_root:
        v = a.get("langfuse.trace.output")
    if v is not None:
        v = decode_jsonish(v)
        if _present(v):
            out = v
    if inp is None:
        inp = _first_attr(a, _IN_A)
    if out is None:
        out = _first_attr(a, _OUT_A)
    if events and (inp is None or out is None):
        ev_in, ev_out = _io_from_events(events)
        if inp is None:
            inp = ev_in
        if out is None:
            out = ev_out
    if inp is None:
        inp = _first_attr(a, _IN_B)
    if out is None:
        out = _first_attr(a, _OUT_B)
    if inp is None and flags & _F_FLAT_PROMPT:
        v = unflatten(a, "gen_ai.prompt.")
        if _present(v):
            inp = v
    if out is None and flags & _F_FLAT_COMPLETION:
        v = unflatten(a, "gen_ai.completion.")
        if _present(v):
            out = v
    if inp is None and flags & _F_FLAT_OI_IN:
        v = _messages_from_openinference(unflatten(a, "llm.input_messages."))
        if _present(v):
            inp = v
    if out is None and flags & _F_FLAT_OI_OUT:
        v = _messages_from_openinference(unflatten(a, "llm.output_messages."))
        if _present(v):
            out = v
    if inp is None:
        inp = _genai_messages(a, "gen_ai.input.messages", with_system=True)
    if out is None:
        out = _genai_messages(a, "gen_ai.output.messages", with_system=False)
    if inp is None:
        inp = _first_attr(a, ("gen_ai.tool.call.arguments", "gen_ai.prompt"))
    if out is None:
        out = _first_attr(a, ("gen_ai.tool.call.result", "gen_ai.completion"))
    # A carrier that is present but empty means "the step produced nothing" (a finding), not "not recorded".
    if inp is None and any(a.get(k) == "" for k in _EMPTY_IN):
        inp = ""
    if out is None and any(a.get(k) == "" for k in _EMPTY_OUT):
        out = ""
    return inp, out


_EMPTY_IN = ("langfuse.observation.input", "input.value", "input", "traceloop.entity.input")
_EMPTY_OUT = ("langfuse.observation.output", "output.value", "output", "traceloop.entity.output", "final_result")


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


_GENERIC_IN = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt", "llm.usage.prompt_tokens")
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


def extract_usage(a: dict) -> tuple[int | None, int | None, int | None, bool]:
    """(input, output, cached, from_aggregated_keys)."""
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
    return None, None, None, False


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


def extract_cost(a: dict) -> float | None:
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


# ---------------------------------------------------------------------------------------------------------------
# context (release, environment, session, user, tags, metadata)


def _span_or_resource(a: dict, r: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        for source in (a, r):
            value = source.get(key)
            if value is not None:
                s = _str(value)
                if s:
                    return s
    return None


def _tags(a: dict, metadata: dict) -> list[str]:
    tags: list[str] = []
    for key in ("langfuse.trace.tags", "langfuse.tags", "ai.telemetry.metadata.tags", "tag.tags"):
        value = a.get(key)
        if value is None:
            continue
        value = decode_jsonish(value)
        if isinstance(value, str):
            value = [t for t in (s.strip() for s in value.split(",")) if t]
        if isinstance(value, list):
            for t in value:
                t = _str(t) if not isinstance(t, str) else t.strip()
                if t and t not in tags:
                    tags.append(t)
    lt = metadata.get("langfuse_tags")
    if isinstance(lt, list):
        for t in lt:
            if isinstance(t, str) and t and t not in tags:
                tags.append(t)
    return tags


def _metadata(a: dict, flags: int, links: list | None) -> dict:
    md: dict = {}
    v = a.get("metadata")  # OpenInference: JSON string
    if v is not None:
        d = decode_jsonish(v)
        if isinstance(d, dict):
            md.update(d)
    v = a.get("langfuse.observation.metadata")
    if v is not None:
        d = decode_jsonish(v)
        if isinstance(d, dict):
            md.update(d)
    if flags & (_F_LF_META | _F_LF_TRACE_META | _F_AI_META | _F_REQUEST_PARAMS):
        trace_md: dict = {}
        params: dict = {}
        for key, value in a.items():
            if key.startswith("langfuse.observation.metadata."):
                md[key[30:]] = decode_jsonish(value)
            elif key.startswith("langfuse.trace.metadata."):
                trace_md[key[24:]] = decode_jsonish(value)
            elif key.startswith("ai.telemetry.metadata."):
                md.setdefault(key[22:], decode_jsonish(value))
            elif key.startswith("gen_ai.request.") and key != "gen_ai.request.model":
                params[key[15:]] = value
        if trace_md:
            md["trace_metadata"] = trace_md
        if params:
            md["model_parameters"] = params
    v = a.get("langfuse.trace.metadata")
    if v is not None:
        d = decode_jsonish(v)
        if isinstance(d, dict):
            md.setdefault("trace_metadata", {}).update(d)
    v = a.get("langfuse.observation.model.parameters", a.get("langfuse.observation.model_parameters"))
    if v is None:
        v = a.get("llm.invocation_parameters")
    if v is not None:
        d = decode_jsonish(v)
        if isinstance(d, dict):
            md["model_parameters"] = {**md.get("model_parameters", {}), **d}
    for key, name in (
        ("langfuse.observation.level", "level"),
        ("langfuse.version", "version"),
        ("langfuse.trace.name", "trace_name"),
        ("langfuse.trace.public", "public"),
        ("langfuse.observation.prompt.name", "prompt_name"),
        ("langfuse.observation.prompt.version", "prompt_version"),
    ):
        v = a.get(key)
        if v is not None:
            md[name] = v
    v = a.get("langfuse.observation.completion_start_time")
    if v is not None:
        dt = parse_iso_datetime(v)
        md["completion_start_time"] = datetime_to_iso(dt) if dt else v
    if links:
        md["links"] = links
    return md


_OUTCOMES = {
    "success": "success",
    "succeeded": "success",
    "pass": "success",
    "passed": "success",
    "ok": "success",
    "true": "success",
    "failure": "failure",
    "failed": "failure",
    "fail": "failure",
    "error": "failure",
    "false": "failure",
}


def outcome_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "success" if value else "failure"
    if isinstance(value, str):
        return _OUTCOMES.get(value.strip().lower())
    return None


def score_value(value: Any) -> float | None:
    f = to_float(value)
    if f is None or f < 0.0 or f > 1.0:
        return None
    return f


def _exceptions(events: list[dict]) -> list[dict]:
    out = []
    for ev in events:
        if ev["name"] == "exception":
            ea = ev["attributes"]
            out.append(
                {
                    "type": _str(ea.get("exception.type")) or "",
                    "message": ea.get("exception.message") if isinstance(ea.get("exception.message"), str) else "",
                    "stacktrace": ea.get("exception.stacktrace")
                    if isinstance(ea.get("exception.stacktrace"), str)
                    else "",
                }
            )
    return out


# ---------------------------------------------------------------------------------------------------------------
# the record


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True or value == 1


def build_span_record(
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str | None,
    name: str,
    attributes: dict,
    events: list[dict],
    status_code: int,
    status_message: str,
    start_ns: int,
    end_ns: int,
    resource: dict,
    scope: str,
    links: list | None = None,
) -> SpanRecord:
    """Map one decoded OTLP span. `attributes` / `resource` hold plain values, `events` are
    `{name, time, attributes}` dicts; times are unix nanoseconds (0 = absent)."""
    a = attributes
    flags = _scan(a) if a else 0
    kind = classify_kind(a, name, scope, flags)

    agent_name = _first_str(a, _AGENT_NAME_KEYS)
    tool_name = _first_str(a, _TOOL_NAME_KEYS)
    if tool_name is None:
        if a.get("traceloop.span.kind") == "tool":
            tool_name = _str(a.get("traceloop.entity.name"))
        elif kind == "TOOL":
            tool_name = _tool_from_span_name(name) or (
                name.strip() or None if a.get("langfuse.observation.type") == "tool" else None
            )
    if kind == "AGENT" and agent_name is None:
        agent_name = _agent_from_span_name(name) or (
            name.strip() or None if a.get("langfuse.observation.type") == "agent" else None
        )
    self_named = a.get("logfire.span_type") == "annotation" or "logfire.feedback.name" in a
    node, node_fallback = node_fields(
        kind=kind, name=name, agent_name=agent_name, tool_name=tool_name, self_named=self_named
    )

    model = _first_str(a, _MODEL_KEYS)
    if model is None:
        if a.get("genkit:metadata:subtype") in ("model", "background-model"):
            model = _str(a.get("genkit:name"))
        if model is None:
            for key in _MODEL_FALLBACK_KEYS:
                value = a.get(key)
                if value is not None:
                    model = _str(decode_jsonish(value))
                    if model:
                        break

    is_root = parent_span_id is None or _truthy(a.get("langfuse.internal.as_root"))
    inp, out = extract_io(a, events, is_root=is_root, flags=flags)

    in_tok, out_tok, cached, aggregated = extract_usage(a)
    has_usage = in_tok is not None or out_tok is not None
    usage_is_aggregate = has_usage and (
        aggregated
        or kind in ("AGENT", "CHAIN")
        or (kind not in ("LLM", "EMBEDDING") and agent_name is not None)
        or a.get("gen_ai.operation.name") in ("invoke_agent", "agent_step", "invoke_workflow")
    )

    # status
    if status_code == 2:
        status = "error"
    elif status_code == 1:
        status = "ok"
    else:
        status = "unset"
    level = a.get("langfuse.observation.level")
    if isinstance(level, str) and level.strip().upper() in _ERROR_LEVELS:
        status = "error"
    msg = a.get("langfuse.observation.status_message")
    if not isinstance(msg, str) or not msg:
        msg = status_message or ""
    exceptions = _exceptions(events) if events else []
    if status == "error" and not msg and exceptions:
        first = exceptions[0]
        msg = f"{first['type']}: {first['message']}" if first["type"] else first["message"]

    r = resource
    metadata = _metadata(a, flags, links)
    release = _span_or_resource(a, r, ("langfuse.release",)) or _span_or_resource(r, a, ("service.version",))
    environment = _span_or_resource(
        a, r, ("langfuse.environment", "deployment.environment.name", "deployment.environment")
    )
    session_id = _span_or_resource(
        a, r, ("langfuse.session.id", "session.id", "gen_ai.conversation.id", "ai.telemetry.metadata.sessionId")
    ) or _str(metadata.get("langfuse_session_id"))
    user_id = _span_or_resource(
        a, r, ("langfuse.user.id", "user.id", "enduser.id", "ai.telemetry.metadata.userId")
    ) or _str(metadata.get("langfuse_user_id"))

    start_time = ns_to_datetime(start_ns) if start_ns else None
    end_time = ns_to_datetime(end_ns) if end_ns else None
    if start_time is None:
        start_time = end_time if end_time is not None else _now()

    outcome = score = task_id = None
    if "clear.outcome" in a:
        outcome = outcome_value(a["clear.outcome"])
    if "clear.score" in a:
        score = score_value(a["clear.score"])
    if "clear.task.id" in a:
        task_id = _str(a["clear.task.id"])

    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        kind=kind,
        node=node,
        node_fallback=node_fallback,
        agent_name=agent_name,
        tool_name=tool_name,
        model=model,
        input=inp,
        output=out,
        status=status,
        status_message=msg,
        start_time=start_time,
        end_time=end_time,
        input_tokens=in_tok,
        output_tokens=out_tok,
        cached_tokens=cached,
        usage_is_aggregate=usage_is_aggregate,
        cost=extract_cost(a),
        release=release,
        environment=environment,
        session_id=session_id,
        user_id=user_id,
        tags=_tags(a, metadata),
        metadata=metadata,
        attributes=a,
        resource=r,
        scope=scope,
        events=events,
        exceptions=exceptions,
        outcome=outcome,
        score=score,
        task_id=task_id,
        is_root=is_root,
    )


def _now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
