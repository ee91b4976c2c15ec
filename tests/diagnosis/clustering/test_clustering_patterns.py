"""Issue 28, item 1: statements with a pattern (a rule judge's finding, e.g. a tool's error with its values taken out)
are grouped by pattern alone. The embedding masks identifiers, so here every statement gets the same vector: the
worst case, where resemblance would put everything in one cluster."""

import numpy as np

from diagnosis.clustering.cluster import cluster_statements
from diagnosis.clustering.levels import cluster_per_node_and_system
from diagnosis.clustering.statements import Statement


def _statements(specs):
    """specs: (tool, judge, pattern, traces); one statement per trace, all at node "agent"."""
    out = []
    for tool, judge, pattern, traces in specs:
        for trace in traces:
            out.append(Statement(id=f"{len(out)}", text=f"{tool} {pattern}", node="agent", trace_id=trace,
                                 span_id=f"s{len(out)}", source=judge, tool=tool,
                                 pattern=f"{judge}|{tool} {pattern}" if pattern else ""))
    return out


def _same_vectors(n):
    vectors = np.zeros((n, 8), dtype=np.float32)
    vectors[:, 0] = 1.0
    return vectors


def _members(result, statements):
    by_id = {s.id: s for s in statements}
    return [{(by_id[m].tool, by_id[m].pattern) for m in c.member_ids} for c in result.clusters]


def test_each_pattern_is_one_cluster_and_nothing_else_joins_it():
    statements = _statements([
        ("book_reservation", "rule.tool_error", "payment amount does not add up", ["a", "b", "c"]),
        ("update_reservation_flights", "rule.tool_error", "payment amount does not add up", ["d", "e", "f"]),
        ("update_reservation_flights", "rule.tool_error", "not enough seats on flight <id>", ["g", "h", "i"]),
        ("update_reservation_flights", "rule.tool_error", "certificate cannot be used", ["j"]),  # too rare: other
        ("", "llm.step", "", ["k", "l", "m"]),  # an LLM judge's prose: clustered by resemblance, apart
    ])
    result = cluster_statements(statements, _same_vectors(len(statements)))
    groups = _members(result, statements)
    assert len(groups) == 4 and all(len(g) == 1 for g in groups)
    assert sorted(result.other) == ["9"]
    clustered = [sid for c in result.clusters for sid in c.member_ids]
    assert sorted(clustered + result.other) == sorted(s.id for s in statements)  # nothing dropped, nothing twice
    assert set(result.assignment) == {s.id for s in statements}


def test_cooccurring_patterns_of_two_tools_or_two_errors_of_one_tool_stay_apart():
    traces = ["t1", "t2", "t3"]
    statements = _statements([
        ("update_reservation_flights", "rule.tool_error", "flight <id> not available on date <date>", traces),
        ("update_reservation_flights", "rule.tool_error", "not enough seats on flight <id>", traces),
        ("think", "rule.empty_output", "produced an empty output", traces),
    ])
    clustering = cluster_per_node_and_system(statements, _same_vectors(len(statements)))
    groups = _members(clustering.node_results["agent"], statements)
    assert len(groups) == 3 and all(len(g) == 1 for g in groups)
    assert clustering.system_clusters == []


def test_a_tools_repeated_calls_and_its_error_in_the_same_traces_are_one_problem():
    traces = ["t1", "t2", "t3"]
    statements = _statements([
        ("invoice_lookup", "rule.repeated_tool_call", "called N times with identical arguments", traces),
        ("invoice_lookup", "rule.span_error", "failed: RateLimitedError", traces),
    ])
    clustering = cluster_per_node_and_system(statements, _same_vectors(len(statements)))
    groups = _members(clustering.node_results["agent"], statements)
    assert len(groups) == 1 and {tool for tool, _ in groups[0]} == {"invoice_lookup"}
