"""Attribute mapping: one decoded OTLP span (plain attribute dict) -> SpanRecord.

Precedence follows Langfuse's OTel mapping (research/observability.md §4.3) with the exceptions listed in
MAPPING.md (next to this file), which also documents every choice made where the otel-samples `expect.json`
files mark a field as ambiguous. `build_span_record` assembles the record from one module per concern:

* kind: kinds.classify_kind (Langfuse type -> OpenInference -> GenAI semconv -> ... -> SPAN);
* node: nodes.node_fields (AGENT spans name themselves, LLM / TOOL spans take the agent they carry, the others
  resolve later from their nearest AGENT ancestor);
* input / output: content.py; usage and cost: usage.py;
* release, environment, session, user, tags, metadata, outcome / score: context.py;
* tokens are the counts as reported (OTel semantics: input includes cache reads, output includes reasoning);
  `usage_is_aggregate` marks spans whose usage re-reports their children's.

Everything is pure Python and cheap: one set intersection to find which known keys a span has, one pass over the
keys for prefix-keyed carriers, dict lookups, no regex per attribute (span-name normalisation uses regexes behind an
LRU cache).
"""

from __future__ import annotations

from typing import Any

from .content import IO_KEYS, extract_io, scan_flags
from .context import (
    CONTEXT_KEYS,
    METADATA_KEYS,
    TAG_KEYS,
    outcome_value,
    resource_context,
    score_value,
    span_context,
    span_metadata,
    span_tags,
)
from .kinds import MODEL_KEYS, classify_kind
from .nodes import agent_from_span_name, node_fields, tool_from_span_name
from .records import SpanRecord
from .usage import COST_KEYS, USAGE_KEYS, extract_cost, extract_usage
from .values import decode_jsonish, first_text, ns_to_datetime, text_value

__all__ = ["KNOWN_KEYS", "build_span_record"]

# Vendor model attributes Langfuse does not read (used for `model`, never for the kind)
_MODEL_FALLBACK_KEYS = ("mlflow.llm.model", "model_name", "llm.request.model", "embedding.model_name")

_AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name", "agent_name")
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "ai.toolCall.name")

_ERROR_LEVELS = {"ERROR", "FATAL", "CRITICAL"}

_MISC_KEYS = frozenset(
    (
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
KNOWN_KEYS = IO_KEYS | USAGE_KEYS | COST_KEYS | CONTEXT_KEYS | METADATA_KEYS | TAG_KEYS | _MISC_KEYS
_CLEAR_KEYS = frozenset(("clear.outcome", "clear.score", "clear.task.id"))


def _exceptions(events: list[dict]) -> list[dict]:
    out = []
    for ev in events:
        if ev["name"] == "exception":
            ea = ev["attributes"]
            out.append(
                {
                    "type": text_value(ea.get("exception.type")) or "",
                    "message": ea.get("exception.message") if isinstance(ea.get("exception.message"), str) else "",
                    "stacktrace": ea.get("exception.stacktrace")
                    if isinstance(ea.get("exception.stacktrace"), str)
                    else "",
                }
            )
    return out


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

    agent_name = first_text(a, _AGENT_NAME_KEYS)
    tool_name = first_text(a, _TOOL_NAME_KEYS)
    if tool_name is None:
        if kind == "TOOL":
            if a.get("traceloop.span.kind") == "tool":
                tool_name = text_value(a.get("traceloop.entity.name"))
            if tool_name is None:
                tool_name = tool_from_span_name(name) or (
                    name.strip() or None if a.get("langfuse.observation.type") == "tool" else None
                )
        elif "traceloop.span.kind" in hit and a.get("traceloop.span.kind") == "tool":
            tool_name = text_value(a.get("traceloop.entity.name"))
    if kind == "AGENT" and agent_name is None:
        agent_name = agent_from_span_name(name) or (
            name.strip() or None if a.get("langfuse.observation.type") == "agent" else None
        )
    self_named = ("logfire.span_type" in hit and a["logfire.span_type"] == "annotation") or (
        "logfire.feedback.name" in hit
    )
    node, node_fallback = node_fields(
        kind=kind, name=name, agent_name=agent_name, tool_name=tool_name, self_named=self_named
    )

    model = first_text(a, MODEL_KEYS)
    if model is None:
        if "genkit:metadata:subtype" in hit and a["genkit:metadata:subtype"] in ("model", "background-model"):
            model = text_value(a.get("genkit:name"))
        if model is None and hit:
            for key in _MODEL_FALLBACK_KEYS:
                value = a.get(key)
                if value is not None:
                    model = text_value(decode_jsonish(value))
                    if model:
                        break

    is_root = parent_span_id is None or (
        "langfuse.internal.as_root" in hit and _truthy(a["langfuse.internal.as_root"])
    )
    inp, out = extract_io(a, hit, events, is_root=is_root, flags=flags)

    in_tok, out_tok, cached, reasoning, aggregated = extract_usage(a, hit)
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
    metadata = span_metadata(a, hit, flags, links)
    if resource_ctx is None:
        resource_ctx = resource_context(r)
    r_release, r_version, environment, session_id, user_id = resource_ctx
    release = r_release or r_version
    ctx_hit = hit & CONTEXT_KEYS
    if ctx_hit:
        release, environment, session_id, user_id = span_context(
            a, r, ctx_hit, release, environment, session_id, user_id
        )
    if metadata:
        if session_id is None:
            session_id = text_value(metadata.get("langfuse_session_id"))
        if user_id is None:
            user_id = text_value(metadata.get("langfuse_user_id"))

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
            task_id = text_value(a["clear.task.id"])

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
        reasoning_tokens=reasoning,
        usage_is_aggregate=usage_is_aggregate,
        cost=extract_cost(a, hit),
        release=release,
        environment=environment,
        session_id=session_id,
        user_id=user_id,
        tags=span_tags(a, metadata) if (hit & TAG_KEYS or "langfuse_tags" in metadata) else [],
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
