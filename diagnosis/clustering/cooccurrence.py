"""Patterns that always show together are one problem.

One fault leaves several symptoms that judges state differently: a retry loop is both "invoice_lookup called 5
times with identical arguments" and five "… failed: RateLimitedError"; a misroute is a rubric violation at the
router and "`orders_worker` calls `order_lookup` (violates …)" at the worker it sent the request to. Their
statements do not resemble each other, but they occur in the same traces and nowhere else. Node clusters whose
trace sets nearly coincide (Jaccard >= COOCCURRENCE_MIN_JACCARD, with at least `min_traces` traces in common) are
one problem:

* at one node, they become one node cluster;
* at several nodes, one system cluster holding them all (the node clusters stay, linked to it), taken out of
  any system cluster their statements were in.

Patterns of rule findings (`Statement.pattern`) keep their causes apart here too: a set never holds two tools'
patterns, nor two patterns one judge found on one tool (a tool's "flight not available" and its "not enough seats"
are two faults, however often one run shows both). A tool's repeated calls and that tool's error are one problem.

The problem is named after its first symptom: the pattern whose statements cite the earliest spans of the traces
(the router before the worker it misroutes to, the worker's repeated calls before each call's error), which is
where the cause is. Distinct faults on disjoint sets of tasks never meet here; two faults that always strike the
same traces cannot be told apart by any judge either, so they are one problem to fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from statistics import median

import numpy as np

from .cluster import NODE_LEVEL, SYSTEM_LEVEL, Cluster, ClusteringResult, ClusterParams
from .statements import Statement, normalize_text
from .unionfind import DisjointSets

__all__ = ["COOCCURRENCE_MIN_JACCARD", "cluster_from_rows", "merge_cooccurring"]

COOCCURRENCE_MIN_JACCARD = 0.8


def cluster_from_rows(cluster_id: str, rows: list[int], statements: Sequence[Statement], vectors: np.ndarray, *,
                      level: str, node: str, n_examples: int, medoid_rows: list[int] | None = None) -> Cluster:
    """A Cluster over these statement rows; the medoid is the statement of `medoid_rows` (default: all) nearest
    the centroid."""
    rows = sorted(rows)
    mean = vectors[rows].astype(np.float64).mean(axis=0)
    centroid = (mean / (np.linalg.norm(mean) or 1.0)).astype(np.float32)
    sims = vectors[rows] @ centroid
    preferred = set(medoid_rows or rows)
    examples: list[str] = []
    seen: set[str] = set()
    order = sorted(range(len(rows)), key=lambda j: (rows[j] not in preferred, -float(sims[j]), rows[j]))
    for j in order:
        text = normalize_text(statements[rows[j]].text)
        if text not in seen:
            seen.add(text)
            examples.append(statements[rows[j]].id)
    return Cluster(
        id=cluster_id, level=level, node=node, member_ids=[statements[r].id for r in rows], centroid=centroid,
        medoid_id=examples[0], size=len(rows), distinct_count=len(seen), cohesion=float(sims.mean()),
        example_ids=examples[:n_examples], trace_ids=sorted({statements[r].trace_id for r in rows}),
        nodes=dict(Counter(statements[r].node for r in rows).most_common()),
        severities=dict(Counter(statements[r].severity for r in rows).most_common()),
    )


def _patterns(cluster: Cluster, statements: Sequence[Statement], row_of: dict[str, int]) -> dict[tuple, set[str]]:
    """(tool, judge) -> the patterns of the cluster's rule findings about a tool."""
    return _row_patterns([row_of[sid] for sid in cluster.member_ids], statements)


def _row_patterns(rows: list[int], statements: Sequence[Statement]) -> dict[tuple, set[str]]:
    found: dict[tuple, set[str]] = {}
    for row in rows:
        s = statements[row]
        if s.pattern and s.tool:
            found.setdefault((s.tool, s.source), set()).add(s.pattern)
    return found


def _joined(a: dict[tuple, set[str]], b: dict[tuple, set[str]]) -> dict[tuple, set[str]] | None:
    """The patterns of two sets as one problem, or None when they may not be one: one tool at most, and one
    pattern per judge on it."""
    merged: dict[tuple, set[str]] = {k: set(v) for k, v in a.items()}
    for key, patterns in b.items():
        merged.setdefault(key, set()).update(patterns)
    if len({tool for tool, _ in merged}) > 1 or any(len(v) > 1 for v in merged.values()):
        return None
    return merged


def _cooccurring(traces: list[set], patterns: list[dict], min_traces: int) -> list[list[int]]:
    """Indices grouped where trace sets nearly coincide and the patterns may be one problem (every group, singletons
    too)."""
    sets = DisjointSets(len(traces))
    for i in range(len(traces)):
        for j in range(i + 1, len(traces)):
            common = len(traces[i] & traces[j])
            if common >= min_traces and common / len(traces[i] | traces[j]) >= COOCCURRENCE_MIN_JACCARD:
                a, b = sets.find(i), sets.find(j)
                merged = _joined(patterns[a], patterns[b]) if a != b else None
                if merged is not None:
                    sets.union(a, b)
                    patterns[sets.find(a)] = merged
    return sets.groups()


def _components(clusters: list[Cluster], min_traces: int, statements: Sequence[Statement],
                row_of: dict[str, int]) -> list[list[int]]:
    groups = _cooccurring([set(c.trace_ids) for c in clusters],
                          [_patterns(c, statements, row_of) for c in clusters], min_traces)
    return [g for g in groups if len(g) > 1]


def _first_symptom(members: list[Cluster], statements: Sequence[Statement], row_of: dict[str, int],
                   started: Mapping[str, float]) -> Cluster:
    """The cluster whose statements cite the earliest spans: per trace, how long after the trace's earliest cited
    span its own earliest one starts; the smallest median wins (ties: the most severe, then the larger cluster; a
    loop and the error of its last attempt may cite the same agent span)."""
    first_in_trace: dict[str, float] = {}
    own: list[dict[str, float]] = []
    for cluster in members:
        times: dict[str, float] = {}
        for sid in cluster.member_ids:
            if sid in started:
                trace = statements[row_of[sid]].trace_id
                times[trace] = min(times.get(trace, started[sid]), started[sid])
                first_in_trace[trace] = min(first_in_trace.get(trace, started[sid]), started[sid])
        own.append(times)
    lag = [median(t - first_in_trace[trace] for trace, t in times.items()) if times else float("inf")
           for times in own]
    rank = {"low": 0, "medium": 1, "high": 2, "critical": 3}
    severity = [max((rank.get(k, 1) for k in c.severities), default=1) for c in members]
    best = min(range(len(members)), key=lambda i: (lag[i], -severity[i], -members[i].size, members[i].id))
    return members[best]


def _system_joined(items: list[tuple[list[int], list[int] | None]], statements: Sequence[Statement],
                   min_traces: int) -> list[tuple[list[int], list[int] | None]]:
    """System clusters (rows, medoid rows) whose trace sets nearly coincide made one: a misroute is the router's
    rubric violation, the worker's wrong lookup and the trace-level "never calls `refund_lookup`", all in the same
    traces. The merged one keeps the medoid of a co-occurring node set (its first symptom) when one is in it."""
    if len(items) < 2:
        return items
    groups = _cooccurring([{statements[r].trace_id for r in rows} for rows, _ in items],
                          [_row_patterns(rows, statements) for rows, _ in items], min_traces)
    out: list[tuple[list[int], list[int] | None]] = []
    for group in groups:
        members = [items[i] for i in group]
        medoid = next((m for _, m in members if m is not None), None)
        out.append((sorted({r for rows, _ in members for r in rows}), medoid))
    return out


def merge_cooccurring(statements: Sequence[Statement], vectors: np.ndarray, *,
                      node_results: dict[str, ClusteringResult], system: ClusteringResult,
                      started: Mapping[str, float] | None = None,
                      params: ClusterParams | None = None) -> tuple[dict[str, ClusteringResult], ClusteringResult]:
    """(node results, system result) with co-occurring node clusters made one problem (module docstring)."""
    p = params or system.params
    started = started or {}
    row_of = {s.id: i for i, s in enumerate(statements)}
    rows_of = lambda cluster: [row_of[sid] for sid in cluster.member_ids]  # noqa: E731
    # One node: co-occurring clusters merge into one.
    merged_nodes: dict[str, ClusteringResult] = {}
    for node, result in node_results.items():
        groups = _components(list(result.clusters), p.min_traces, statements, row_of)
        grouped = {i for group in groups for i in group}
        clusters = [c for i, c in enumerate(result.clusters) if i not in grouped]
        for group in groups:
            members = [result.clusters[i] for i in group]
            root = _first_symptom(members, statements, row_of, started)
            rows = [r for c in members for r in rows_of(c)]
            clusters.append(cluster_from_rows(root.id, rows, statements, vectors, level=NODE_LEVEL, node=node,
                                              n_examples=p.n_examples, medoid_rows=rows_of(root)))
        if groups:
            clusters.sort(key=lambda c: (-c.size, c.id))
            assignment = {sid: None for sid in result.assignment}
            for c in clusters:
                assignment.update(dict.fromkeys(c.member_ids, c.id))
            result = ClusteringResult(clusters=clusters, other=result.other, assignment=assignment,
                                      n_statements=result.n_statements, n_groups=result.n_groups,
                                      n_units=result.n_units, params=result.params)
        merged_nodes[node] = result
    # Several nodes: one system cluster per co-occurring set, which takes its statements out of other ones.
    every = [c for result in merged_nodes.values() for c in result.clusters]
    problems: list[tuple[list[int], list[int] | None]] = []
    taken: set[int] = set()
    for group in _components(every, p.min_traces, statements, row_of):
        members = [every[i] for i in group]
        root = _first_symptom(members, statements, row_of, started)
        rows = [r for c in members for r in rows_of(c)]
        problems.append((rows, rows_of(root)))
        taken.update(rows)
    kept: list[tuple[list[int], list[int] | None]] = []
    for cluster in system.clusters:
        rows = [r for r in rows_of(cluster) if r not in taken]
        nodes = {statements[r].node for r in rows if statements[r].node}
        trace_level = any(not statements[r].node for r in rows)
        if (len(nodes) >= 2 or trace_level) and len(rows) >= p.min_cluster_size and \
                len({statements[r].trace_id for r in rows}) >= p.min_traces:
            kept.append((rows, None))
    joined = _system_joined(kept + problems, statements, p.min_traces)
    if not problems and len(joined) == len(kept):
        return merged_nodes, system
    kept = joined
    kept.sort(key=lambda item: (-len(item[0]), min(item[0])))
    clusters = [cluster_from_rows(f"system:{i}", rows, statements, vectors, level=SYSTEM_LEVEL, node="",
                                  n_examples=p.n_examples, medoid_rows=medoid)
                for i, (rows, medoid) in enumerate(kept)]
    assignment: dict[str, str | None] = {s.id: None for s in statements}
    for cluster in clusters:
        assignment.update(dict.fromkeys(cluster.member_ids, cluster.id))
    explained = {sid for result in merged_nodes.values() for c in result.clusters for sid in c.member_ids}
    other = [s.id for s in statements if assignment[s.id] is None and s.id not in explained]
    return merged_nodes, ClusteringResult(clusters=clusters, other=other, assignment=assignment,
                                          n_statements=system.n_statements, n_groups=system.n_groups,
                                          n_units=system.n_units, params=p)
