"""Which existing insight each newly judged statement joins, between two re-clusterings (a continuous refresh).

A statement joins the insight of the most similar statement the run already placed at its place (its node; the
trace level for a statement with no node), when their cosine is CLEAR_INSIGHT_JOIN_SIMILARITY (0.6) or more; else
it waits for the next re-clustering. At system level a node statement follows its node insight: system problems are
made of node clusters (clustering/problems.py), so it goes where most statements of that node insight are. That is where the re-clustering puts it too: clusters are cut by average linkage over near-duplicate
groups, so a statement lands in the cluster of its close neighbours, and the re-clustering keeps the statements it
placed before where they were (sticky.py), so that cluster is still their insight. Matching a single statement to an
insight's centroid instead (the identity rule for whole clusters) agreed with the re-clustering for 31% of new
statements on 50,000 traces: one statement is much farther from a broad pattern's centroid than from its neighbours.

A statement with a pattern (a rule finding: statements.py) joins the insight at its place whose fingerprint is that
pattern's (groups.pattern_fingerprint): resemblance cannot tell two tools' errors apart (the embedding masks
identifiers), and the re-clustering groups such statements by pattern alone. Failing that, it joins by resemblance
like any statement, but only an insight that is not one pattern's (a tool's co-occurring findings made one problem);
no statement joins another pattern's insight by resemblance.

The neighbours are read once per refresh: the run's placed statements grouped by vector key (judges repeat
themselves, so there are far fewer keys than statements), their vectors from the embedding cache. The cost follows
the distinct texts and the new statements, not the number of traces.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db.models import Count

from diagnosis.insights.groups import is_pattern_fingerprint, pattern_fingerprint
from diagnosis.insights.statements import Draft
from diagnosis.models import DiagnosisRun, Insight, InsightStatement

JOIN_SIMILARITY_DEFAULT = 0.6


def join_similarity() -> float:
    return float(getattr(settings, "CLEAR_INSIGHT_JOIN_SIMILARITY", None) or JOIN_SIMILARITY_DEFAULT)


@dataclass(slots=True)
class Assigned:
    node_insight: int | None = None
    system_insight: int | None = None

    @property
    def joined(self) -> bool:
        return self.node_insight is not None or self.system_insight is not None


@dataclass(slots=True)
class _Scope:
    vectors: np.ndarray  # unit rows, one per distinct vector key placed in this scope
    insights: list[int]
    fingerprints: dict[int, str] = field(default_factory=dict)  # insight -> its fingerprint (statements with a pattern)
    keyed: np.ndarray | None = None  # per row: its insight is one pattern's, which only that pattern joins


@dataclass(slots=True)
class Neighbours:
    scopes: dict[tuple[str, str], _Scope]  # ("node", node) per node; ("system", "") for trace-level statements
    system_of_node: dict[int, int | None]  # node insight -> the system insight most of its statements are in


def placed_neighbours(*, run: DiagnosisRun, live: dict[int, int], cache) -> Neighbours:
    """The run's placed statements, one row per (place, vector key) with the insight most of that key's statements
    are in there; and where the statements of each node insight are at system level."""
    rows = InsightStatement.objects.filter(run=run, excluded=False).values(
        "vector_key", "node", "node_insight_id", "system_insight_id").annotate(n=Count("id"))
    votes: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    systems: dict[int, Counter] = defaultdict(Counter)
    for row in rows:
        key, node = row["vector_key"], row["node"]
        node_insight, system_insight = live.get(row["node_insight_id"]), live.get(row["system_insight_id"])
        if node and node_insight is not None:
            systems[node_insight][system_insight] += row["n"]
            if key:
                votes[("node", node, key)][node_insight] += row["n"]
        if key and not node and system_insight is not None:
            votes[("system", "", key)][system_insight] += row["n"]
    vectors = cache.get_many(sorted({key for _, _, key in votes}))
    grouped: dict[tuple[str, str], tuple[list, list]] = defaultdict(lambda: ([], []))
    for (level, node, key), counter in votes.items():
        if key in vectors:
            grouped[(level, node)][0].append(vectors[key])
            grouped[(level, node)][1].append(counter.most_common(1)[0][0])
    fingerprints = dict(Insight.objects.filter(pk__in={i for _, insights in grouped.values() for i in insights})
                        .values_list("pk", "fingerprint"))
    scopes = {}
    for scope, (vecs, insights) in grouped.items():
        matrix = np.stack(vecs).astype(np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        keyed = np.asarray([is_pattern_fingerprint(fingerprints.get(i) or "") for i in insights], dtype=bool)
        scopes[scope] = _Scope(matrix, insights, {i: fingerprints.get(i, "") for i in insights}, keyed)
    return Neighbours(scopes, {i: c.most_common(1)[0][0] for i, c in systems.items()})


def statements_assign(*, drafts: list[Draft], vectors: np.ndarray, neighbours: Neighbours,
                      threshold: float | None = None) -> list[Assigned]:
    """One Assigned per draft, in order; None at a level: the statement waits for the next re-clustering (or, at
    system level, the node insight it joined is in no system insight)."""
    threshold = join_similarity() if threshold is None else threshold
    out: list[Assigned] = []
    memo: dict[tuple[str, str, bytes], int | None] = {}
    for row, draft in enumerate(drafts):
        scope_key = ("node", draft.node) if draft.node else ("system", "")
        # repeated texts share one vector and one answer; a pattern decides alone
        memo_key = (*scope_key, draft.pattern.encode() if draft.pattern else vectors[row].tobytes())
        if memo_key not in memo:
            memo[memo_key] = None
            scope = neighbours.scopes.get(scope_key)
            if scope is not None and draft.pattern:
                wanted = pattern_fingerprint(pattern=draft.pattern, node=draft.node,
                                             level="node" if draft.node else "system")
                memo[memo_key] = next((i for i in scope.insights if scope.fingerprints.get(i) == wanted), None)
            if scope is not None and memo[memo_key] is None:
                sims = np.where(scope.keyed, -np.inf, scope.vectors @ vectors[row])
                best = int(np.argmax(sims))
                memo[memo_key] = scope.insights[best] if float(sims[best]) >= threshold else None
        found = memo[memo_key]
        if not draft.node:
            out.append(Assigned(system_insight=found))
        else:
            # At system level a node statement goes where its node cluster goes (clustering/problems.py: system
            # problems are made of node clusters), so with the statements of the node insight it joined.
            out.append(Assigned(node_insight=found,
                                system_insight=neighbours.system_of_node.get(found) if found is not None else None))
    return out
