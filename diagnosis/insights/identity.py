"""Which insight each of a run's clusters is: the library's identity matching plus the people's decisions.

1. Candidates are the project's insights of the same level and node embedded with the same model, merged-away ones
   included (their own centroids keep attracting their pattern). diagnosis.clustering.match_clusters_to_insights
   pairs clusters and insights one-to-one: centroid cosine >= IDENTITY_THRESHOLD (0.8, settable with
   CLEAR_INSIGHT_IDENTITY_THRESHOLD), else the same fingerprint with cosine >= 0.6. Rejected, ignored and fixed
   insights are candidates like any other, so a rejected pattern is never recreated as new.
2. A match on an insight merged into another resolves to the merge target (followed to the end of the chain). A
   cluster left unmatched is compared once more with every candidate that belongs to a merge (many-to-one): after
   a merge two clusters of one run may both be that insight.
3. Split families: insights split from one another (split_from) share a pattern the clustering sees as one. A
   cluster matched to any live member of a family is divided among the family's members by nearest centroid, so a
   split made by a person survives later runs.
4. Clusters resolving to one insight are pooled. Statements in no cluster go to the "other" bucket of their level
   and node.
5. A cluster whose statements share one pattern (a rule finding: statements.py) is the insight whose fingerprint
   is that pattern's at its level and node (groups.pattern_fingerprint), or a new one; it takes no part in the
   centroid matching, and no other cluster takes such an insight. The embedding masks identifiers, so the centroids
   of two tools' errors are nearly equal and would swap their insights from run to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from django.conf import settings

IDENTITY_THRESHOLD_DEFAULT = 0.8


@dataclass(slots=True)
class Known:
    """An existing insight as identity matching needs it."""

    id: int
    level: str
    node: str
    centroid: np.ndarray
    fingerprint: str
    merged_into: int | None
    split_from: int | None


@dataclass(slots=True)
class Group:
    """A final set of statements (row numbers) that becomes or updates one insight."""

    level: str
    node: str
    rows: list[int]
    insight_id: int | None = None  # None: a new insight (or the other bucket)
    is_other: bool = False
    via: str = "new"
    similarity: float = 0.0
    clusters: list[str] = field(default_factory=list)


def identity_threshold() -> float:
    return float(getattr(settings, "CLEAR_INSIGHT_IDENTITY_THRESHOLD", None) or IDENTITY_THRESHOLD_DEFAULT)


def _final(insight_id: int, known: dict[int, Known]) -> int:
    seen = set()
    while known[insight_id].merged_into in known and insight_id not in seen:
        seen.add(insight_id)
        insight_id = known[insight_id].merged_into
    return insight_id


def insights_resolved(known: list[Known]) -> dict[int, int]:
    """Insight id -> the insight it stands for now (itself, or the end of its merge chain)."""
    by_id = {k.id: k for k in known}
    return {k.id: _final(k.id, by_id) for k in known}


def _families(known: dict[int, Known], live: set[int]) -> dict[int, list[int]]:
    """Live insight -> the live insights of its split family (same level, node and split root), itself included."""
    def root(i: int) -> int:
        seen = set()
        while known[i].split_from in known and i not in seen:
            seen.add(i)
            i = known[i].split_from
        return i

    members: dict[tuple, list[int]] = {}
    for i in sorted(live):
        members.setdefault((known[i].level, known[i].node, root(i)), []).append(i)
    return {i: family for family in members.values() for i in family}


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def groups_assign(*, clusters: list, fingerprints: dict[str, str], rows_of: dict[str, list[int]],
                  vectors: np.ndarray, known: list[Known], other_rows: dict[tuple[str, str], list[int]],
                  threshold: float | None = None, patterns: dict[str, str] | None = None) -> list[Group]:
    """clusters: the run's library Clusters (both levels); rows_of: cluster id -> statement rows; other_rows:
    (level, node) -> rows of the statements in no cluster; patterns: cluster id -> the fingerprint of the pattern
    all its statements share (step 5). Returns the groups, other buckets last."""
    from diagnosis.clustering import ClusterRef, InsightRef, match_clusters_to_insights

    threshold = identity_threshold() if threshold is None else threshold
    patterns = patterns or {}
    by_id = {k.id: k for k in known}
    live = {k.id for k in known if k.merged_into is None or k.merged_into not in by_id}
    # a live insight wins over one merged away (which resolves to its target anyway)
    by_fingerprint = {(k.level, k.node, k.fingerprint): k.id
                for k in sorted(known, key=lambda k: (k.merged_into is None, k.id)) if k.fingerprint}
    claimed = {by_fingerprint[(c.level, c.node, patterns[c.id])] for c in clusters
               if c.id in patterns and (c.level, c.node, patterns[c.id]) in by_fingerprint}
    refs = [InsightRef(str(k.id), k.centroid, k.node, k.level, k.fingerprint) for k in known if k.id not in claimed]
    news = [ClusterRef(c.id, c.centroid, c.node, c.level, fingerprints.get(c.id, "")) for c in clusters
            if c.id not in patterns]
    matches = match_clusters_to_insights(news, refs, threshold=threshold)
    for c in clusters:
        if c.id in patterns:
            found = by_fingerprint.get((c.level, c.node, patterns[c.id]))
            matches[c.id] = _PatternMatch(str(found) if found is not None else None,
                                          "pattern" if found is not None else "new", 1.0 if found is not None else 0.0)
    merge_targets = {_final(k.id, by_id) for k in known if k.merged_into is not None}
    families = _families(by_id, live)
    pooled: dict[int, Group] = {}
    groups: list[Group] = []
    for cluster in clusters:
        match = matches[cluster.id]
        target: int | None = _final(int(match.insight_id), by_id) if match.insight_id is not None else None
        via, similarity = match.via, match.similarity
        if target is None and merge_targets and cluster.id not in patterns:
            target, similarity = _merge_fallback(cluster, known, by_id, merge_targets, threshold)
            via = "merge" if target is not None else via
        rows = rows_of[cluster.id]
        if target is None:
            groups.append(Group(cluster.level, cluster.node, list(rows), None, False, "new", 0.0, [cluster.id]))
            continue
        family = families.get(target, [target]) if cluster.id not in patterns else [target]
        if len(family) > 1:
            centroids = _unit_rows(np.stack([by_id[i].centroid for i in family]))
            nearest = np.argmax(vectors[rows] @ centroids.T, axis=1)
            parts = {family[j]: [r for r, n in zip(rows, nearest) if n == j] for j in range(len(family))}
        else:
            parts = {target: list(rows)}
        for insight_id, part in parts.items():
            if not part:
                continue
            group = pooled.get(insight_id)
            if group is None:
                group = pooled[insight_id] = Group(cluster.level, cluster.node, [], insight_id, False,
                                                   via if insight_id == target else "split", similarity)
                groups.append(group)
            group.rows.extend(part)
            group.clusters.append(cluster.id)
    for (level, node), rows in sorted(other_rows.items()):
        if rows:
            groups.append(Group(level, node, sorted(rows), None, True, "other"))
    for group in groups:
        group.rows = sorted(set(group.rows))
    return groups


@dataclass(slots=True)
class _PatternMatch:
    insight_id: str | None
    via: str
    similarity: float


def _merge_fallback(cluster, known: list[Known], by_id: dict[int, Known], merge_targets: set[int],
                    threshold: float) -> tuple[int | None, float]:
    best, best_sim = None, threshold
    centroid = cluster.centroid / (np.linalg.norm(cluster.centroid) or 1.0)
    for k in known:
        if k.level != cluster.level or k.node != cluster.node:
            continue
        final = _final(k.id, by_id)
        if final not in merge_targets:
            continue
        sim = float(np.dot(centroid, k.centroid / (np.linalg.norm(k.centroid) or 1.0)))
        if sim >= best_sim:
            best, best_sim = final, sim
    return best, (best_sim if best is not None else 0.0)
