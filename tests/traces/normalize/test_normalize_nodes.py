"""resolve_nodes: nearest AGENT ancestor in the batch, then known stored parents, else the span's fallback."""

from __future__ import annotations

from datetime import datetime, timezone

from traces.normalize import SpanRecord, resolve_nodes

T = datetime(2025, 1, 1, tzinfo=timezone.utc)
TRACE = "a" * 32


def _span(sid, parent=None, *, kind="SPAN", node=None, fallback=None, trace=TRACE, tokens=None):
    return SpanRecord(trace_id=trace, span_id=sid, parent_span_id=parent, name=f"span {sid}", kind=kind, node=node,
                      node_fallback=fallback or f"fb-{sid}", start_time=T, input_tokens=tokens, output_tokens=tokens)


def test_nearest_agent_ancestor_child_first_order():
    spans = [
        _span("4", "3", kind="TOOL"),  # exported child-first
        _span("3", "2", kind="CHAIN"),
        _span("2", "1", kind="AGENT", node="researcher"),
        _span("1", None, kind="AGENT", node="orchestrator"),
        _span("5", "1", kind="LLM"),
        _span("6", "5", kind="TOOL", node="writer"),  # carries its own agent name: kept
        _span("7", None, kind="CHAIN"),
        _span("8", "7", kind="TOOL", fallback="search"),
    ]
    resolve_nodes(spans)
    nodes = {s.span_id: s.node for s in spans}
    assert nodes == {"4": "researcher", "3": "researcher", "2": "researcher", "1": "orchestrator",
                     "5": "orchestrator", "6": "writer", "7": "fb-7", "8": "search"}


def test_known_nodes_for_parents_stored_earlier():
    spans = [_span("3", "2", kind="LLM"), _span("9", "8", kind="TOOL"), _span("11", "10"), _span("13", "12")]
    resolve_nodes(spans, known_nodes={"2": ("AGENT", "planner"), "8": ("CHAIN", "planner"), "10": ("SPAN", None)})
    assert [s.node for s in spans] == ["planner", "planner", "fb-11", "fb-13"]


def test_same_span_id_in_another_trace_is_not_a_parent():
    spans = [_span("2", None, kind="AGENT", node="a", trace="b" * 32), _span("3", "2", kind="LLM")]
    resolve_nodes(spans)
    assert spans[1].node == "fb-3"


def test_cycles_and_self_parents_terminate():
    spans = [_span("1", "2"), _span("2", "1"), _span("3", "3")]
    resolve_nodes(spans)
    assert [s.node for s in spans] == ["fb-1", "fb-2", "fb-3"]


def test_deep_chain_memoised():
    spans = [_span("0", None, kind="AGENT", node="root-agent")]
    spans += [_span(str(i), str(i - 1)) for i in range(1, 3000)]
    resolve_nodes(list(reversed(spans)))
    assert {s.node for s in spans} == {"root-agent"}


def test_parents_reporting_children_usage_are_marked_aggregate():
    spans = [
        _span("1", None, kind="SPAN", tokens=100),  # root re-reporting everything below
        _span("2", "1", kind="LLM", tokens=60),  # a framework LLM span wrapping the provider call
        _span("3", "2", kind="LLM", tokens=60),  # the provider call: the one to count
        _span("4", "1", kind="LLM", tokens=40),
        _span("5", "1", kind="TOOL"),
    ]
    resolve_nodes(spans)
    assert [s.usage_is_aggregate for s in spans] == [True, True, False, False, False]
    counted = sum(s.input_tokens for s in spans if s.input_tokens is not None and not s.usage_is_aggregate)
    assert counted == 100


def _lines_run(function, *args) -> int:
    """How many lines of Python `function` executes: a measure of work that does not depend on the machine's load."""
    import sys

    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        function(*args)
    finally:
        sys.settrace(None)
    return count


def test_aggregate_marking_is_linear_on_deep_chains():
    def chain(n):
        return [_span(str(i), str(i - 1) if i else None, tokens=1) for i in range(n)]

    spans = chain(5000)
    resolve_nodes(spans)
    assert [s.usage_is_aggregate for s in spans[:-1]] == [True] * 4999
    assert spans[-1].usage_is_aggregate is False
    # Four times the depth, about four times the work (a walk up the chain from every span would be sixteen).
    ratio = _lines_run(resolve_nodes, chain(4000)) / _lines_run(resolve_nodes, chain(1000))
    assert ratio < 6, ratio
