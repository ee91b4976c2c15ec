"""System-level clusters as problems: one problem, one system cluster, never two problems in one.

Clustering every statement of a run at once (`cluster_statements` over the whole system) groups statements that
share words, not causes: rule and rubric statements are templates ("X called 5 times with identical arguments",
"`X` calls `Y` (violates …)"), so a system cluster could hold a mediator bug and a routing bug at
once. Node-level clusters separate them (each node's statements are clustered apart). So the raw system clusters
are only candidates, refined here:

1. Each candidate's statements are split into units by where the node level put them: one unit per node cluster,
   one per node for that node's unclustered statements, one for trace-level statements (node "": trace judges,
   whole-trace rubrics).
2. Node-cluster units join when they make the same failing statement: their most common statements are equal once
   instance values (ids, numbers, quoted values) and node names are taken out, or their centroids are near
   duplicates (cosine >= `near_duplicate_threshold`, 0.95). The same failure seen at several nodes is one problem;
   different nodes with different failing statements are different root causes and stay apart, however many words
   the statements share ("invoice_lookup called 5 times…" at one node, "order_lookup called 5 times…" at
   another). Trace-level and unclustered statements bring no pattern of their own: they go with the node cluster
   they resemble most when the centroids are that close (cosine >= `merge_threshold`, 0.85), else with the other
   such units a judge they share found (one criterion failing thinly over several nodes). Two rubrics violated once
   or twice each at two nodes are not one problem because their templates share words: a five-trace window made the
   demo's mediator bug and its misroute one system cluster that way.
3. A joined group is a system cluster when it says something the node level does not: it spans two or more nodes,
   or it holds trace-level statements. A group that is one node cluster again (a twin of a node insight) is
   dropped: that problem has its node insight, and one ticket.
4. Groups under `min_cluster_size` statements or `min_traces` traces are dissolved. The system "other" bucket holds
   the statements no cluster of either level explains.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .cluster import SYSTEM_LEVEL, ClusteringResult, ClusterParams
from .cooccurrence import cluster_from_rows
from .statements import Statement
from .unionfind import DisjointSets

__all__ = ["system_by_problem"]

TRACE_LEVEL = ("trace", "")
_INSTANCE = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|\b[A-Z]{1,5}-\d+\b|\b[0-9a-f]{8,}\b|\b\d+(?:\.\d+)?\b")


def _signature(text: str, nodes: set[str]) -> str:
    """The statement with instance values and node names taken out: what stays is the failure it states."""
    text = _INSTANCE.sub("<v>", text)
    for node in sorted(nodes, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(node)}\b", "<node>", text)
    return " ".join(text.lower().split())


def _unit_of(statement: Statement, node_results: dict[str, ClusteringResult]) -> tuple[str, str]:
    if not statement.node:
        return TRACE_LEVEL
    cluster_id = node_results[statement.node].assignment.get(statement.id)
    return ("cluster", cluster_id) if cluster_id else ("unclustered", statement.node)


def _unit_vector(rows: list[int], vectors: np.ndarray) -> np.ndarray:
    mean = vectors[rows].astype(np.float64).mean(axis=0)
    return mean / (np.linalg.norm(mean) or 1.0)


def _join(units: list[list[int]], signatures: list[str | None], judges: list[set[str]], vectors: np.ndarray, *,
          near_duplicate: float, join: float) -> list[list[int]]:
    """Groups of unit indexes. Established units (node clusters, with a signature) join each other when they state
    the same failure (equal signatures, or near-duplicate centroids); the others (trace-level, a node's unclustered
    statements: no evidence of a cause of their own) go with the established unit they are most similar to when the
    cosine is >= join, else with the other such units that a judge they share found (or as close): one criterion
    failing thinly at several nodes. Different criteria (two rubrics, two rules) failing once each at different
    nodes are no evidence of one problem; only co-occurrence (cooccurrence.py) makes them one."""
    sets = DisjointSets(len(units))
    centroids = np.stack([_unit_vector(rows, vectors) for rows in units])
    similarity = centroids @ centroids.T
    anchors = [i for i, sig in enumerate(signatures) if sig is not None]
    for a, i in enumerate(anchors):
        for j in anchors[a + 1:]:
            if signatures[i] == signatures[j] or similarity[i, j] >= near_duplicate:
                sets.union(i, j)
    strays: list[int] = []
    for i in (i for i, sig in enumerate(signatures) if sig is None):
        best = max(anchors, key=lambda j: similarity[i, j]) if anchors else None
        # Only a close resemblance makes a stray statement part of an established pattern (a handled not-found
        # error is not a rate-limit error for sharing "execute_tool … failed"); the rest stay together.
        if best is not None and similarity[i, best] >= join:
            sets.union(i, best)
        else:
            strays.append(i)
    for a, i in enumerate(strays):
        for j in strays[a + 1:]:
            if judges[i] & judges[j] or similarity[i, j] >= join:
                sets.union(i, j)
    return sets.groups()


def system_by_problem(statements: Sequence[Statement], vectors: np.ndarray, *,
                      node_results: dict[str, ClusteringResult], candidates: ClusteringResult,
                      params: ClusterParams | None = None) -> ClusteringResult:
    """The system-level result: `candidates` (system clusters over every statement) refined into problems (see
    the module docstring). Same vectors and statement order as the candidates were clustered with."""
    p = params or candidates.params
    vectors = np.asarray(vectors, dtype=np.float32)
    row_of = {s.id: i for i, s in enumerate(statements)}
    all_nodes = {s.node for s in statements if s.node}
    kept: list[list[int]] = []
    for candidate in candidates.clusters:
        by_unit: dict[tuple[str, str], list[int]] = {}
        for sid in candidate.member_ids:
            row = row_of[sid]
            by_unit.setdefault(_unit_of(statements[row], node_results), []).append(row)
        keys = list(by_unit)
        signatures = [Counter(_signature(statements[r].text, all_nodes) for r in by_unit[k]).most_common(1)[0][0]
                      if k[0] == "cluster" else None for k in keys]
        judges = [{statements[r].source for r in by_unit[k]} for k in keys]
        for component in _join([by_unit[k] for k in keys], signatures, judges, vectors,
                               near_duplicate=p.near_duplicate_threshold, join=p.merge_threshold):
            units = [keys[i] for i in component]
            rows = [r for k in units for r in by_unit[k]]
            nodes = {statements[r].node for r in rows if statements[r].node}
            says_more = len(nodes) >= 2 or TRACE_LEVEL in units
            traces = {statements[r].trace_id for r in rows}
            if says_more and len(rows) >= p.min_cluster_size and len(traces) >= p.min_traces:
                kept.append(rows)
    kept.sort(key=lambda rows: (-len(rows), min(rows)))  # largest first, ties by first row: stable ids
    clusters = [cluster_from_rows(f"system:{i}", rows, statements, vectors, level=SYSTEM_LEVEL, node="",
                                  n_examples=p.n_examples) for i, rows in enumerate(kept)]
    assignment: dict[str, str | None] = {s.id: None for s in statements}
    for cluster in clusters:
        for sid in cluster.member_ids:
            assignment[sid] = cluster.id
    other = [s.id for s in statements if assignment[s.id] is None
             and not (s.node and node_results[s.node].assignment.get(s.id))]
    return ClusteringResult(clusters=clusters, other=other, assignment=assignment,
                            n_statements=candidates.n_statements, n_groups=candidates.n_groups,
                            n_units=candidates.n_units, params=p)
