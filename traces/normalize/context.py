"""Span context: release, environment, session, user, tags and metadata, and Clear's own outcome / score values.

Each context value is read from the span's attributes first, then from its resource's (MAPPING.md lists the keys
and their order). `resource_context` reads a resource once for all its spans; a span carrying context keys itself
(`CONTEXT_KEYS`) gets them through `span_context`.
"""

from __future__ import annotations

from typing import Any

from .content import F_AI_META, F_LF_META, F_LF_TRACE_META, F_REQUEST_PARAMS
from .values import datetime_to_iso, decode_jsonish, parse_iso_datetime, text_value, to_float

__all__ = [
    "CONTEXT_KEYS",
    "METADATA_KEYS",
    "TAG_KEYS",
    "outcome_value",
    "resource_context",
    "score_value",
    "span_context",
    "span_metadata",
    "span_tags",
]

_RELEASE_KEYS = ("langfuse.release",)
_VERSION_KEYS = ("service.version",)
_ENV_KEYS = ("langfuse.environment", "deployment.environment.name", "deployment.environment")
_SESSION_KEYS = ("langfuse.session.id", "session.id", "gen_ai.conversation.id", "ai.telemetry.metadata.sessionId")
_USER_KEYS = ("langfuse.user.id", "user.id", "enduser.id", "ai.telemetry.metadata.userId")
CONTEXT_KEYS = frozenset((*_RELEASE_KEYS, *_VERSION_KEYS, *_ENV_KEYS, *_SESSION_KEYS, *_USER_KEYS))
_RELEASE_SET = frozenset((*_RELEASE_KEYS, *_VERSION_KEYS))
_ENV_SET, _SESSION_SET, _USER_SET = frozenset(_ENV_KEYS), frozenset(_SESSION_KEYS), frozenset(_USER_KEYS)
_TAG_KEYS = ("langfuse.trace.tags", "langfuse.tags", "ai.telemetry.metadata.tags", "tag.tags")
TAG_KEYS = frozenset(_TAG_KEYS)
METADATA_KEYS = frozenset(
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


def _span_or_resource(a: dict, r: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        for source in (a, r):
            value = source.get(key)
            if value is not None:
                s = text_value(value)
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


def span_context(
    a: dict, r: dict, ctx_hit: set, release: str | None, environment: str | None, session_id: str | None,
    user_id: str | None
) -> tuple[str | None, str | None, str | None, str | None]:
    """(release, environment, session, user) for a span carrying some of CONTEXT_KEYS itself (`ctx_hit`): its keys
    win over the resource's values, key by key (span before resource for each key)."""
    if ctx_hit & _RELEASE_SET:
        release = _span_or_resource(a, r, _RELEASE_KEYS) or _span_or_resource(r, a, _VERSION_KEYS)
    if ctx_hit & _ENV_SET:
        environment = _span_or_resource(a, r, _ENV_KEYS)
    if ctx_hit & _SESSION_SET:
        session_id = _span_or_resource(a, r, _SESSION_KEYS)
    if ctx_hit & _USER_SET:
        user_id = _span_or_resource(a, r, _USER_KEYS)
    return release, environment, session_id, user_id


def span_tags(a: dict, metadata: dict) -> list[str]:
    """The union of the tag carriers (arrays, JSON-array strings or comma lists) and metadata `langfuse_tags`."""
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
                t = text_value(t) if not isinstance(t, str) else t.strip()
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


def span_metadata(a: dict, hit: set, flags: int, links: list | None) -> dict:
    """The metadata carriers merged into one dict (see MAPPING.md), with the span's links."""
    if not (hit & METADATA_KEYS) and not flags & _MD_FLAGS:
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


# ---------------------------------------------------------------------------------------------------------------
# Clear's own conventions (`clear.outcome`, `clear.score`)

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
    """`clear.outcome` as "success" / "failure" (booleans and the usual spellings), else None."""
    if isinstance(value, bool):
        return "success" if value else "failure"
    if isinstance(value, str):
        return _OUTCOMES.get(value.strip().lower())
    return None


def score_value(value: Any) -> float | None:
    """`clear.score`: a number in [0, 1], else None."""
    f = to_float(value)
    if f is None or f < 0.0 or f > 1.0:
        return None
    return f
