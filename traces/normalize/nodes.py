"""Resolve each span's node (the agent it belongs to) from its ancestors.

The mapping sets `node` on spans that name it themselves (AGENT spans, LLM/TOOL spans carrying
`gen_ai.agent.name`, evaluator/annotation spans). `resolve_nodes` fills the rest from the nearest AGENT ancestor:
first within the batch, then via `known_nodes` for parents stored by an earlier batch, else `node_fallback`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .records import SpanRecord

_EMPTY: Mapping[str, tuple[str | None, str | None]] = {}
_MAX_DEPTH = 10_000


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
        span.node = found if found is not None else (span.node_fallback or span.name)

    _mark_aggregate_usage(spans, by_id)


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
