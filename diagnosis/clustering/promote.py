"""No associated problem without a name: a tool's error that recurs is never left in an "other" bucket.

A pattern (a rule finding's generalised title, cluster.py) becomes a cluster when it has `min_cluster_size` (3)
statements in `min_traces` (2) traces; the rest goes to the "other" bucket of its level and node, which has no
title and gets no ticket. For a tool's error that is too strict: a write refused because an earlier write had
locked the object, seen in 2 runs that both failed, is a cause, and on a project where a quarter of the runs fail it
is associated with failure. So after the clustering, each "other" bucket's statements of an error judge (on a tool or
span: they carry a pattern) are grouped by pattern, and a pattern seen in at least `min_traces` traces whose traces
are associated with failure (the lift interval above 1, stats.py) — or whose association is unknown because fewer
than MIN_SUCCEEDING judged traces succeeded (a set of failed runs: every error pattern is then ranked by frequency,
as every titled insight is) — becomes a cluster of its own: a titled insight with a ticket. The statements leave the
system "other" bucket too, which holds only what no cluster of either level explains (problems.py). Patterns of
other judges (a repeated call, an outlier, a rubric) stay: "other" is where single findings wait to recur.

The other way round, an error pattern whose every statement is of a recovered error (diagnosis/judges/recovery.py:
the run later reached what the failed call sought) is no problem unless its traces are associated with failure (a
retry that went through with wrong arguments): such a node cluster goes to the "other" bucket (unless a system
cluster holds it), and such an "other" pattern is not promoted, even without succeeding traces. An error recovered
in some runs and not in others stays one cluster: the insights count its recovered runs inside it (stats.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .cluster import NODE_LEVEL, SYSTEM_LEVEL, ClusteringResult
from .cooccurrence import cluster_from_rows
from .levels import MultiLevelClustering
from .statements import Statement
from .stats import MIN_SUCCEEDING, TraceInfo, issue_lift

__all__ = ["ERROR_JUDGES", "other_errors_promote"]

ERROR_JUDGES = frozenset({"rule.span_error", "rule.tool_error", "rule.exit_code"})


def _eligible(traces_with: set[str], traces: Mapping[str, TraceInfo], min_traces: int,
              recovered: bool = False) -> bool:
    """Recurring (min_traces) and associated with failure, or unknown for want of succeeding traces (not enough for
    a pattern made of recovered errors alone)."""
    hit = {t for t in traces_with if t in traces}
    if len(hit) < min_traces:
        return False
    known = {t for t, info in traces.items() if info.failed is not None}
    n1 = len(hit & known)
    a = sum(1 for t in hit & known if traces[t].failed)
    c = sum(1 for t in known - hit if traces[t].failed)
    n2 = len(known) - n1
    if (n1 - a) + (n2 - c) < MIN_SUCCEEDING:
        return not recovered  # no lift for want of succeeding traces: unknown, ranked by frequency like any other
    _, interval = issue_lift(a, n1, c, n2)
    return interval is not None and interval[0] > 1


def _demote(result: ClusteringResult, statements: Sequence[Statement], traces: Mapping[str, TraceInfo], *,
            recovered: set[str], system: ClusteringResult, row_of: dict[str, int]) -> list[str]:
    """Move the node clusters of recovered errors alone that are not associated with failure (and that no system
    cluster holds) to the "other" buckets; returns the moved ids."""
    moved: list[str] = []
    for cluster in list(result.clusters):
        members = [statements[row_of[sid]] for sid in cluster.member_ids]
        if not all(s.id in recovered and s.source in ERROR_JUDGES for s in members) \
                or any(system.assignment.get(s.id) for s in members) \
                or _eligible({s.trace_id for s in members}, traces, 1, recovered=True):
            continue
        result.clusters.remove(cluster)
        for sid in cluster.member_ids:
            result.assignment[sid] = None
        moved += cluster.member_ids
    if moved:
        result.other[:] = sorted([*result.other, *moved], key=row_of.__getitem__)
        system.other[:] = sorted([*system.other, *moved], key=row_of.__getitem__)
    return moved


def _promote(result: ClusteringResult, statements: Sequence[Statement], vectors: np.ndarray,
             traces: Mapping[str, TraceInfo], *, level: str, node: str, min_traces: int,
             row_of: dict[str, int], recovered: set[str]) -> list[str]:
    """Move the eligible error patterns of `result.other` into clusters of their own; returns the moved ids."""
    by_pattern: dict[str, list[int]] = {}
    for sid in result.other:
        s = statements[row_of[sid]]
        if s.pattern and s.source in ERROR_JUDGES:
            by_pattern.setdefault(s.pattern, []).append(row_of[sid])
    moved: list[str] = []
    prefix = f"node:{node}:" if level == NODE_LEVEL else "system:"
    for pattern in sorted(by_pattern, key=lambda p: (-len(by_pattern[p]), min(by_pattern[p]))):
        rows = by_pattern[pattern]
        if not _eligible({statements[r].trace_id for r in rows}, traces, min_traces,
                         recovered=all(statements[r].id in recovered for r in rows)):
            continue
        taken, n = {c.id for c in result.clusters}, len(result.clusters)
        while f"{prefix}{n}" in taken:
            n += 1
        cluster = cluster_from_rows(f"{prefix}{n}", rows, statements, vectors, level=level, node=node,
                                    n_examples=result.params.n_examples)
        result.clusters.append(cluster)
        result.assignment.update(dict.fromkeys(cluster.member_ids, cluster.id))
        moved += cluster.member_ids
    if moved:
        gone = set(moved)
        result.other[:] = [sid for sid in result.other if sid not in gone]
    return moved


def other_errors_promote(clustering: MultiLevelClustering, statements: Sequence[Statement], vectors: np.ndarray,
                         traces: Mapping[str, TraceInfo], *, recovered: set[str] = frozenset(),
                         min_traces: int | None = None) -> int:
    """Promote, in place, the recurring error patterns of the "other" buckets that are associated with failure (or
    unknown without succeeding traces) to clusters, and send the clusters of recovered errors alone that are not to
    "other" (module docstring); returns the statements moved. traces: every judged trace id (Statement.trace_id) ->
    TraceInfo; recovered: the ids of the statements of recovered errors."""
    vectors = np.asarray(vectors, dtype=np.float32)
    row_of = {s.id: i for i, s in enumerate(statements)}
    system = clustering.system_result
    demoted = 0
    if recovered:
        for result in clustering.node_results.values():
            demoted += len(_demote(result, statements, traces, recovered=set(recovered), system=system,
                                   row_of=row_of))
    moved: set[str] = set()
    for node, result in clustering.node_results.items():
        floor = min_traces if min_traces is not None else result.params.min_traces
        moved |= set(_promote(result, statements, vectors, traces, level=NODE_LEVEL, node=node, min_traces=floor,
                              row_of=row_of, recovered=set(recovered)))
    if moved:  # explained at node level now: no longer in the system "other" bucket
        system.other[:] = [sid for sid in system.other if sid not in moved]
    floor = min_traces if min_traces is not None else system.params.min_traces
    # Statements without a node take part at system level only: their error patterns are promoted there.
    node_less = ClusteringResult(clusters=system.clusters, other=[sid for sid in system.other
                                                                  if not statements[row_of[sid]].node],
                                 assignment=system.assignment, n_statements=system.n_statements,
                                 n_groups=system.n_groups, n_units=system.n_units, params=system.params)
    promoted = _promote(node_less, statements, vectors, traces, level=SYSTEM_LEVEL, node="", min_traces=floor,
                        row_of=row_of, recovered=set(recovered))
    if promoted:
        gone = set(promoted)
        system.other[:] = [sid for sid in system.other if sid not in gone]
        for cluster in system.clusters:
            clustering.links.setdefault(cluster.id, [])  # a pattern of statements without a node links none
    return demoted + len(moved) + len(promoted)
