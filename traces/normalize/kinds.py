"""Span kind: which of KINDS (records.py) one decoded OTLP span is, from its attributes alone.

Precedence follows Langfuse's OTel mapping (research/observability.md §4.3) with the exceptions listed in MAPPING.md
(next to this file), first matching rule wins: Langfuse observation type -> OpenInference span kind -> GenAI
`gen_ai.operation.name` -> Genkit subtype -> Vercel `ai.*.do*` / `ai.toolCall` -> `gen_ai.tool.*` -> Flue -> LiveKit ->
vendor kinds (`mlflow.spanType`, `traceloop.span.kind`, `llm.request.type`, `langwatch.span.type`,
`langsmith.span.kind`, Vercel outer `ai.*`) -> any model attribute => LLM -> small heuristics -> SPAN.
`gen_ai.agent.name` never makes a span an AGENT.
"""

from __future__ import annotations

from typing import Any

from .content import F_FLAT_PROMPT, F_FLUE_TASK, F_FLUE_TOOL, F_LIVEKIT
from .values import decode_jsonish

__all__ = ["LANGFUSE_TYPE_TO_KIND", "MODEL_KEYS", "classify_kind"]

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
MODEL_KEYS = (
    "langfuse.observation.model.name",
    "gen_ai.response.model",
    "ai.model.id",
    "gen_ai.request.model",
    "llm.response.model",
    "llm.model_name",
    "model",
)


def _vendor_value(value: Any) -> str | None:
    """A vendor kind value, possibly JSON-encoded (MLflow stores '"LLM"')."""
    if not isinstance(value, str):
        return None
    value = decode_jsonish(value)
    return value.strip() if isinstance(value, str) else None


def classify_kind(a: dict, name: str, scope: str, flags: int = 0) -> str:
    """The span kind, first matching rule wins (see module docstring). `flags` come from
    `content.scan_flags`."""
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
    for key in MODEL_KEYS:
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
