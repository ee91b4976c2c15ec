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

Input / output, usage and cost extraction live in content.py. Everything is pure Python and cheap: one set
intersection to find which known keys a span has, one pass over the keys for prefix-keyed carriers, dict lookups,
no regex per attribute (span-name normalisation uses regexes behind an LRU cache).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from .content import (
    F_AI_META,
    F_FLAT_PROMPT,
    F_FLUE_TASK,
    F_FLUE_TOOL,
    F_LF_META,
    F_LF_TRACE_META,
    F_LIVEKIT,
    F_REQUEST_PARAMS,
    IO_KEYS,
    extract_io,
    scan_flags,
)
from .records import SpanRecord
from .usage import COST_KEYS, USAGE_KEYS, cost_from_mapping, extract_cost, extract_usage, usage_from_mapping
from .values import datetime_to_iso, decode_jsonish, ns_to_datetime, parse_iso_datetime, to_float

__all__ = [
    "LANGFUSE_TYPE_TO_KIND",
    "build_span_record",
    "classify_kind",
    "cost_from_mapping",
    "node_fields",
    "normalize_name",
    "outcome_value",
    "resource_context",
    "score_value",
    "usage_from_mapping",
]

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
    if flags & F_FLUE_TOOL:
        return "TOOL"
    if flags & F_FLUE_TASK:
        return "AGENT"
    if name in ("agent_turn", "start_agent_activity", "function_tool") and (
        flags & F_LIVEKIT or "livekit" in scope.lower()
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
    if flags & F_FLAT_PROMPT or "llm.input_messages.0.message.role" in a or "llm.input_messages.0.message.content" in a:
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
# context (release, environment, session, user, tags, metadata)


_RELEASE_KEYS = ("langfuse.release",)
_VERSION_KEYS = ("service.version",)
_ENV_KEYS = ("langfuse.environment", "deployment.environment.name", "deployment.environment")
_SESSION_KEYS = ("langfuse.session.id", "session.id", "gen_ai.conversation.id", "ai.telemetry.metadata.sessionId")
_USER_KEYS = ("langfuse.user.id", "user.id", "enduser.id", "ai.telemetry.metadata.userId")
_CONTEXT_KEYS = frozenset((*_RELEASE_KEYS, *_VERSION_KEYS, *_ENV_KEYS, *_SESSION_KEYS, *_USER_KEYS))
_RELEASE_SET = frozenset((*_RELEASE_KEYS, *_VERSION_KEYS))
_ENV_SET, _SESSION_SET, _USER_SET = frozenset(_ENV_KEYS), frozenset(_SESSION_KEYS), frozenset(_USER_KEYS)
_TAG_KEYS = ("langfuse.trace.tags", "langfuse.tags", "ai.telemetry.metadata.tags", "tag.tags")
_MD_KEYS = frozenset(
    (
        "metadata",
        "langfuse.observation.metadata",
        "langfuse.trace.metadata",
        "langfuse.observation.model.parameters",
        "langfuse.observation.model_parameters",
        "llm.invocation_parameters",
        "langfuse.observation.level",
        "langfuse.version",
        "langfuse.trace.name",
        "langfuse.trace.public",
        "langfuse.observation.prompt.name",
        "langfuse.observation.prompt.version",
        "langfuse.observation.completion_start_time",
    )
)
_MISC_KEYS = frozenset(
    (
        *_TAG_KEYS,
        "clear.outcome",
        "clear.score",
        "clear.task.id",
        "langfuse.internal.as_root",
        "langfuse.observation.level",
        "langfuse.observation.status_message",
        "langfuse.observation.type",
        "logfire.span_type",
        "logfire.feedback.name",
        "traceloop.span.kind",
        "genkit:metadata:subtype",
        "gen_ai.operation.name",
        *_MODEL_FALLBACK_KEYS,
    )
)
# every attribute key a rule consults: `hit = KNOWN_KEYS.intersection(a)` lets absent groups be skipped at once
KNOWN_KEYS = IO_KEYS | USAGE_KEYS | COST_KEYS | _CONTEXT_KEYS | _MD_KEYS | _MISC_KEYS
_CLEAR_KEYS = frozenset(("clear.outcome", "clear.score", "clear.task.id"))
_TAG_SET = frozenset(_TAG_KEYS)


def _span_or_resource(a: dict, r: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        for source in (a, r):
            value = source.get(key)
            if value is not None:
                s = _str(value)
                if s:
                    return s
    return None


def resource_context(resource: dict) -> tuple:
    """(langfuse.release, service.version, environment, session, user) from resource attributes alone; computed
    once per resource and used for every span that carries none of these keys itself."""
    e: dict = {}
    return (
        _span_or_resource(resource, e, _RELEASE_KEYS),
        _span_or_resource(resource, e, _VERSION_KEYS),
        _span_or_resource(resource, e, _ENV_KEYS),
        _span_or_resource(resource, e, _SESSION_KEYS),
        _span_or_resource(resource, e, _USER_KEYS),
    )


def _tags(a: dict, metadata: dict) -> list[str]:
    tags: list[str] = []
    for key in _TAG_KEYS:
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


_MD_FLAGS = F_LF_META | F_LF_TRACE_META | F_AI_META | F_REQUEST_PARAMS
_MD_PREFIXES = (
    "gen_ai.request.",
    "langfuse.observation.metadata.",
    "langfuse.trace.metadata.",
    "ai.telemetry.metadata.",
)


def _metadata(a: dict, hit: set, flags: int, links: list | None) -> dict:
    if not (hit & _MD_KEYS) and not flags & _MD_FLAGS:
        return {"links": links} if links else {}
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
    if flags & _MD_FLAGS:
        trace_md: dict = {}
        params: dict = {}
        for key, value in a.items():
            if not key.startswith(_MD_PREFIXES):
                continue
            if key.startswith("gen_ai.request."):
                if key != "gen_ai.request.model":
                    params[key[15:]] = value
            elif key.startswith("langfuse.observation.metadata."):
                md[key[30:]] = decode_jsonish(value)
            elif key.startswith("langfuse.trace.metadata."):
                trace_md[key[24:]] = decode_jsonish(value)
            elif key.startswith("ai.telemetry.metadata."):
                md.setdefault(key[22:], decode_jsonish(value))
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
    resource_ctx: tuple | None = None,
) -> SpanRecord:
    """Map one decoded OTLP span. `attributes` / `resource` hold plain values, `events` are
    `{name, time, attributes}` dicts; times are unix nanoseconds (0 = absent). `resource_ctx` is
    `resource_context(resource)`, passed by decoders that map many spans of one resource."""
    a = attributes
    hit = KNOWN_KEYS.intersection(a)
    flags = scan_flags(a) if a else 0
    kind = classify_kind(a, name, scope, flags)

    agent_name = _first_str(a, _AGENT_NAME_KEYS)
    tool_name = _first_str(a, _TOOL_NAME_KEYS)
    if tool_name is None:
        if kind == "TOOL":
            if a.get("traceloop.span.kind") == "tool":
                tool_name = _str(a.get("traceloop.entity.name"))
            if tool_name is None:
                tool_name = _tool_from_span_name(name) or (
                    name.strip() or None if a.get("langfuse.observation.type") == "tool" else None
                )
        elif "traceloop.span.kind" in hit and a.get("traceloop.span.kind") == "tool":
            tool_name = _str(a.get("traceloop.entity.name"))
    if kind == "AGENT" and agent_name is None:
        agent_name = _agent_from_span_name(name) or (
            name.strip() or None if a.get("langfuse.observation.type") == "agent" else None
        )
    self_named = ("logfire.span_type" in hit and a["logfire.span_type"] == "annotation") or (
        "logfire.feedback.name" in hit
    )
    node, node_fallback = node_fields(
        kind=kind, name=name, agent_name=agent_name, tool_name=tool_name, self_named=self_named
    )

    model = _first_str(a, _MODEL_KEYS)
    if model is None:
        if "genkit:metadata:subtype" in hit and a["genkit:metadata:subtype"] in ("model", "background-model"):
            model = _str(a.get("genkit:name"))
        if model is None and hit:
            for key in _MODEL_FALLBACK_KEYS:
                value = a.get(key)
                if value is not None:
                    model = _str(decode_jsonish(value))
                    if model:
                        break

    is_root = parent_span_id is None or (
        "langfuse.internal.as_root" in hit and _truthy(a["langfuse.internal.as_root"])
    )
    inp, out = extract_io(a, hit, events, is_root=is_root, flags=flags)

    in_tok, out_tok, cached, aggregated = extract_usage(a, hit)
    usage_is_aggregate = (in_tok is not None or out_tok is not None) and (
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
    msg = status_message or ""
    if "langfuse.observation.level" in hit:
        level = a["langfuse.observation.level"]
        if isinstance(level, str) and level.strip().upper() in _ERROR_LEVELS:
            status = "error"
    if "langfuse.observation.status_message" in hit:
        lf_msg = a["langfuse.observation.status_message"]
        if isinstance(lf_msg, str) and lf_msg:
            msg = lf_msg
    exceptions = _exceptions(events) if events else []
    if status == "error" and not msg and exceptions:
        first = exceptions[0]
        msg = f"{first['type']}: {first['message']}" if first["type"] else first["message"]

    r = resource
    metadata = _metadata(a, hit, flags, links)
    if resource_ctx is None:
        resource_ctx = resource_context(r)
    r_release, r_version, environment, session_id, user_id = resource_ctx
    release = r_release or r_version
    ctx_hit = hit & _CONTEXT_KEYS
    if ctx_hit:  # span-level keys win, key by key (span before resource for each key)
        if ctx_hit & _RELEASE_SET:
            release = _span_or_resource(a, r, _RELEASE_KEYS) or _span_or_resource(r, a, _VERSION_KEYS)
        if ctx_hit & _ENV_SET:
            environment = _span_or_resource(a, r, _ENV_KEYS)
        if ctx_hit & _SESSION_SET:
            session_id = _span_or_resource(a, r, _SESSION_KEYS)
        if ctx_hit & _USER_SET:
            user_id = _span_or_resource(a, r, _USER_KEYS)
    if metadata:
        if session_id is None:
            session_id = _str(metadata.get("langfuse_session_id"))
        if user_id is None:
            user_id = _str(metadata.get("langfuse_user_id"))

    start_time = ns_to_datetime(start_ns) if start_ns else None
    end_time = ns_to_datetime(end_ns) if end_ns else None
    if start_time is None:
        start_time = end_time if end_time is not None else _now()

    outcome = score = task_id = None
    if hit & _CLEAR_KEYS:
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
        cost=extract_cost(a, hit),
        release=release,
        environment=environment,
        session_id=session_id,
        user_id=user_id,
        tags=_tags(a, metadata) if (hit & _TAG_SET or "langfuse_tags" in metadata) else [],
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
