"""A span's node (the agent it belongs to): named from the span itself, else resolved from its ancestors.

From the span alone (`node_fields`, called by the OTLP mapping and the Langfuse normaliser): AGENT spans name
themselves; LLM / TOOL spans take the agent name they carry (the owning agent); evaluator / annotation spans name
themselves (they judge a run, they are not a step of it); the others get `node_fallback` = carried agent name, else
tool name, else the span name with ids / numbers / uuids stripped (`normalize_name`).

`resolve_nodes` fills the rest from the nearest AGENT ancestor: first within the batch, then via `known_nodes` for
parents stored by an earlier batch, else `node_fallback`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from .records import SpanRecord

_EMPTY: Mapping[str, tuple[str | None, str | None]] = {}
_MAX_DEPTH = 10_000
NODE_MAX = 300  # Span.node is varchar(300)


def resolve_nodes(
    spans: list[SpanRecord],
    *,
    known_nodes: Mapping[str, tuple[str | None, str | None]] = _EMPTY,
) -> None:
    """Fill `node` (in place) for spans whose node is None.

    Walks up the parent chain inside the batch (by trace id + span id); the first AGENT ancestor gives the node.
    When the chain leaves the batch, `known_nodes[parent_span_id] = (kind, node)` describes an already stored
    parent: a stored AGENT gives its node; a stored non-AGENT span gives its own resolved node (it was resolved
    from its ancestors when it was stored, so it already names the agent above it). Otherwise the span's
    `node_fallback` is used. Cycles and absurd depths are cut.

    Spans are also marked `usage_is_aggregate` when one of their descendants in the batch reports its own usage
    (a parent re-reporting its children's usage must not be added to the sums).
    """
    by_id: dict[tuple[str, str], SpanRecord] = {(s.trace_id, s.span_id): s for s in spans}
    # memo: span key -> node inherited from the nearest AGENT ancestor (None = none found)
    inherited: dict[tuple[str, str], str | None] = {}

    for span in spans:
        if span.node is not None:
            continue
        key = (span.trace_id, span.span_id)
        found = _inherit(span, by_id, inherited, known_nodes)
        inherited[key] = found
        span.node = found if found is not None else fallback_node(span)

    _mark_aggregate_usage(spans, by_id)


def fallback_node(span: SpanRecord) -> str:
    # A name may hold a whole prompt or URL (Span.name keeps 500 characters); the node column keeps NODE_MAX.
    return (span.node_fallback or span.name)[:NODE_MAX]


def _inherit(
    span: SpanRecord,
    by_id: dict[tuple[str, str], SpanRecord],
    memo: dict[tuple[str, str], str | None],
    known: Mapping[str, tuple[str | None, str | None]],
) -> str | None:
    """Node of the nearest AGENT ancestor of `span` (None if there is none)."""
    chain: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = {(span.trace_id, span.span_id)}
    result: str | None = None
    current = span
    for _ in range(_MAX_DEPTH):
        pid = current.parent_span_id
        if pid is None:
            break
        pkey = (current.trace_id, pid)
        if pkey in seen:  # cycle
            break
        if pkey in memo:
            result = memo[pkey]  # memo only holds non-AGENT spans: the agent above them is the agent above us
            break
        parent = by_id.get(pkey)
        if parent is None:
            stored = known.get(pid)
            if stored is not None:
                kind, node = stored
                result = node if node else None
            break
        if parent.kind == "AGENT" and parent.node:
            result = parent.node
            break
        seen.add(pkey)
        chain.append(pkey)
        current = parent
    for key in chain:
        memo[key] = result
    return result


def _mark_aggregate_usage(spans: list[SpanRecord], by_id: dict[tuple[str, str], SpanRecord]) -> None:
    walked: set[tuple[str, str]] = set()  # spans whose whole ancestor chain has been processed already
    for span in spans:
        if span.usage_is_aggregate or (span.input_tokens is None and span.output_tokens is None):
            continue
        current = span
        for _ in range(_MAX_DEPTH):
            pid = current.parent_span_id
            if pid is None:
                break
            pkey = (current.trace_id, pid)
            if pkey in walked:
                break
            parent = by_id.get(pkey)
            if parent is None:
                break
            walked.add(pkey)
            if parent.input_tokens is not None or parent.output_tokens is not None:
                parent.usage_is_aggregate = True
            current = parent


# ---------------------------------------------------------------------------------------------------------------
# names decidable from the span alone

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


def agent_from_span_name(name: str) -> str | None:
    for prefix in ("invoke_agent ", "create_agent "):
        if name.startswith(prefix):
            rest = name[len(prefix):].strip()
            return rest or None
    return None


def tool_from_span_name(name: str) -> str | None:
    if name.startswith("execute_tool "):
        rest = name[len("execute_tool "):].strip()
        return rest or None
    return None


def node_fields(
    *, kind: str, name: str, agent_name: str | None, tool_name: str | None, self_named: bool = False
) -> tuple[str | None, str]:
    """(node, node_fallback) decidable from the span alone (see the module docstring); the rest is
    resolved later by `resolve_nodes`."""
    if kind == "AGENT":
        node = agent_name or agent_from_span_name(name) or normalize_name(name)
        return node, node
    fallback = agent_name or tool_name or normalize_name(name)
    if kind in ("LLM", "TOOL"):
        return agent_name, fallback
    if kind == "EVALUATOR" or self_named:
        own = tool_name or normalize_name(name)
        return own, own
    return None, fallback
