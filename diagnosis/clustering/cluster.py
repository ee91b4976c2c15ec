"""Cluster statements into recurring failure patterns, per node and across the system.

Pipeline of `cluster_statements` (defaults and reasons in METHOD.md):
1. Deduplicate (dedup.py): exact (normalised text) then near duplicates (cosine >= 0.95) -> groups with counts.
2. Units: with <= `direct_max` groups every group is a unit; otherwise mini-batch k-means makes
   k = clamp(groups / `micro_ratio`, 2, `micro_max`) micro-clusters, which become the units; an incoherent
   micro-cluster (own mean pairwise cosine below the cut) is re-split with the same linkage, and lone light
   groups from it become orphans that later join a cluster only by the linkage rule.
3. Weighted average linkage over the units (linkage.py), cut where the average statement-to-statement cosine
   falls below 1 - `distance_threshold`. No cap on the number of clusters.
4. Merge clusters whose normalised centroids have cosine >= `merge_threshold` (near-duplicate clusters).
5. A group whose cosine to its cluster's centroid is < `min_member_similarity` leaves the cluster (k-means
   may have glued it to a micro-cluster it does not belong to); clusters with fewer than `min_cluster_size`
   statements, or fewer than `min_traces` distinct traces, are dissolved. Whatever leaves goes to "other":
   statements are never dropped.
Memory is O(n d) for the vectors plus O(m^2) for m <= 2 * max(direct_max, micro_max) units.

Statements with a `pattern` (a rule judge's finding, its title generalised: "book_reservation returned an error:
payment amount does not add up, total price is N, but paid N") are not clustered by resemblance: each pattern is one
cluster (under the same size and trace minimums), and no other statement joins it. The embedding masks identifiers
(statements.canonical_text), so by resemblance two tools' errors, or two errors of one tool, would be one cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .dedup import NEAR_DUPLICATE_THRESHOLD, Dedup, deduplicate
from .linkage import average_linkage_cut, micro_clusters
from .statements import Statement

__all__ = ["Cluster", "ClusterParams", "ClusteringResult", "cluster_statements", "SYSTEM_LEVEL", "NODE_LEVEL"]

SYSTEM_LEVEL = "system"
NODE_LEVEL = "node"


@dataclass(frozen=True, slots=True)
class ClusterParams:
    """Every knob of `cluster_statements`, with its default. See METHOD.md for why each value."""

    distance_threshold: float = 0.6
    near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD
    merge_threshold: float = 0.85
    min_member_similarity: float = 0.3
    min_cluster_size: int = 3
    min_traces: int = 2
    direct_max: int = 3000
    micro_ratio: int = 20
    micro_max: int = 3000
    n_examples: int = 5
    random_state: int = 0


@dataclass(slots=True)
class Cluster:
    """One recurring pattern. `size` counts member statements including duplicates; `distinct_count` the
    distinct normalised texts; `centroid` is the L2-normalised, count-weighted mean of the members' vectors;
    `medoid_id` the member whose text has the highest summed cosine to all members (for unit vectors that is
    the highest cosine to the centroid: the exact cosine medoid); `example_ids` are distinct-text members
    nearest the centroid, medoid first; `cohesion` the mean member cosine to the centroid."""

    id: str
    level: str
    node: str
    member_ids: list[str]
    centroid: np.ndarray
    medoid_id: str
    size: int
    distinct_count: int
    cohesion: float
    example_ids: list[str] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)
    severities: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class ClusteringResult:
    """Clusters (largest first), the "other" bucket (ids of statements that fit no cluster) and the
    assignment of every input statement id to a cluster id or None (= other)."""

    clusters: list[Cluster]
    other: list[str]
    assignment: dict[str, str | None]
    n_statements: int
    n_groups: int  # after exact + near deduplication
    n_units: int  # groups or micro-clusters that were linked
    params: ClusterParams

    def by_id(self) -> dict[str, Cluster]:
        return {c.id: c for c in self.clusters}


def _normalize_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def _weighted_means(vectors: np.ndarray, weights: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Unnormalised weighted mean vector per label (rows with label < 0 ignored)."""
    keep = labels >= 0
    sums = np.zeros((k, vectors.shape[1]), dtype=np.float64)
    tot = np.zeros(k, dtype=np.float64)
    if keep.any():
        from scipy.sparse import csr_matrix

        idx = np.flatnonzero(keep)
        mat = csr_matrix((weights[idx].astype(np.float64), (labels[idx], idx)), shape=(k, len(vectors)))
        sums = np.asarray(mat @ vectors.astype(np.float64))
        tot = np.bincount(labels[idx], weights=weights[idx].astype(np.float64), minlength=k)
    tot[tot == 0] = 1.0
    return sums / tot[:, None]


def _merge_close(centroids: np.ndarray, threshold: float) -> np.ndarray:
    """Union of clusters whose normalised centroids have cosine >= threshold; returns new labels."""
    k = len(centroids)
    parent = np.arange(k)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    if k > 1 and threshold <= 1.0:
        unit = _normalize_rows(centroids)
        for start in range(0, k, 1024):
            block = unit[start:start + 1024] @ unit.T
            rows, cols = np.nonzero(block >= threshold)
            for r, c in zip(rows + start, cols):
                if c > r:
                    a, b = find(int(r)), find(int(c))
                    if a != b:
                        parent[max(a, b)] = min(a, b)
    roots = np.array([find(i) for i in range(k)], dtype=np.int64)
    _, labels = np.unique(roots, return_inverse=True)
    return labels.astype(np.int64)


def _mean_pairwise(sum_vec_sq: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Mean cosine over distinct statement pairs of a set, from |sum of its unit vectors|^2 and its size."""
    pairs = weight * weight - weight
    out = np.ones_like(weight, dtype=np.float64)
    ok = pairs > 0
    out[ok] = (sum_vec_sq[ok] - weight[ok]) / pairs[ok]
    return out


def _split_incoherent(
    vecs: np.ndarray, counts: np.ndarray, unit_of: np.ndarray, p: ClusterParams, unit_cap: int,
) -> np.ndarray:
    """k-means puts every group in some micro-cluster, also groups that resemble nothing (outliers). A
    micro-cluster whose own mean pairwise cosine is below the cut is re-clustered with the same average
    linkage; its sub-clusters become units, and a lone group lighter than min_cluster_size becomes an orphan
    (unit -1). Most incoherent first, until the unit count would pass unit_cap."""
    min_sim = 1.0 - p.distance_threshold
    k = int(unit_of.max()) + 1
    means = _weighted_means(vecs, counts, unit_of, k)
    weight = np.bincount(unit_of, weights=counts, minlength=k)
    coherence = _mean_pairwise((means * means).sum(1) * weight * weight, weight)
    members = _split_by_label(unit_of, k)
    out = unit_of.copy()
    n_units = k
    for u in np.argsort(coherence):
        if coherence[u] >= min_sim or n_units >= unit_cap:
            break
        rows = members[u]
        if len(rows) < 2:
            continue
        sub = average_linkage_cut(vecs[rows].astype(np.float64) , counts[rows], min_sim)
        n_sub = int(sub.max()) + 1
        sizes = np.bincount(sub, minlength=n_sub)
        weights = np.bincount(sub, weights=counts[rows], minlength=n_sub)
        new_ids = {}
        for j, s_ in enumerate(sub):
            if sizes[s_] == 1 and weights[s_] < p.min_cluster_size:
                out[rows[j]] = -1
                continue
            if s_ not in new_ids:
                new_ids[s_] = u if not new_ids else n_units + len(new_ids) - 1
            out[rows[j]] = new_ids[s_]
        n_units += max(len(new_ids) - 1, 0)
    return out


def _group_labels(dd: Dedup, p: ClusterParams) -> tuple[np.ndarray, int]:
    """Steps 2-5 on the deduplicated groups: a cluster label per group (-1 = other) and the unit count."""
    vecs, counts = dd.vectors, dd.count.astype(np.float64)
    g = dd.n_groups
    if g == 0:
        return np.zeros(0, dtype=np.int64), 0
    min_sim = 1.0 - p.distance_threshold
    if g <= p.direct_max:
        unit_of = np.arange(g)
    else:
        k = int(np.clip(g // max(p.micro_ratio, 1), 2, p.micro_max))
        unit_of = micro_clusters(vecs, counts, k, random_state=p.random_state)
        unit_of = _split_incoherent(vecs, counts, unit_of, p, unit_cap=2 * max(p.micro_max, p.direct_max))
    linked = unit_of >= 0
    _, unit_of_linked = np.unique(unit_of[linked], return_inverse=True)
    n_units = int(unit_of_linked.max()) + 1 if linked.any() else 0
    labels = np.full(g, -1, dtype=np.int64)
    if n_units:
        unit_means = _weighted_means(vecs[linked], counts[linked], unit_of_linked, n_units)
        unit_weight = np.bincount(unit_of_linked, weights=counts[linked], minlength=n_units)
        labels[linked] = average_linkage_cut(unit_means, unit_weight, min_sim)[unit_of_linked]
        k = int(labels.max()) + 1
        merged = _merge_close(_weighted_means(vecs, counts, labels, k), p.merge_threshold)
        labels[linked] = merged[labels[linked]]
    k = int(labels.max()) + 1
    if k and (~linked).any():
        # orphans join the cluster whose statements they are, on average, close enough to (the linkage rule)
        means = _weighted_means(vecs, counts, labels, k)
        orphans = np.flatnonzero(~linked)
        sims = vecs[orphans] @ means.T
        best = sims.argmax(1)
        ok = sims[np.arange(len(orphans)), best] >= min_sim
        labels[orphans[ok]] = best[ok]
    if k:
        # members far from their cluster's centroid leave it (one pass against the centroids with all members)
        centroids = _normalize_rows(_weighted_means(vecs, counts, labels, k))
        member_sim = np.einsum("ij,ij->i", vecs, centroids[np.maximum(labels, 0)])
        labels = np.where((labels >= 0) & (member_sim >= p.min_member_similarity), labels, -1)
    return labels, n_units


def cluster_statements(
    statements: Sequence[Statement],
    vectors: np.ndarray,
    *,
    params: ClusterParams | None = None,
    level: str = SYSTEM_LEVEL,
    node: str = "",
    id_prefix: str | None = None,
    **overrides: float | int,
) -> ClusteringResult:
    """Cluster `statements` (vectors: one L2-normalised row each, same order) into recurring patterns.

    params / **overrides: `ClusterParams` fields (e.g. distance_threshold=0.55). level/node label the
    clusters; ids are f"{id_prefix}{i}" with id_prefix defaulting to "system:" or f"node:{node}:".
    Deterministic for a given input order and random_state.
    """
    p = params or ClusterParams()
    if overrides:
        p = ClusterParams(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, **overrides})
    n = len(statements)
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise ValueError(f"expected {n} vectors, got array of shape {vectors.shape}")
    prefix = id_prefix if id_prefix is not None else (f"node:{node}:" if level == NODE_LEVEL else "system:")
    if n == 0:
        return ClusteringResult([], [], {}, 0, 0, 0, p)
    if any(s.pattern for s in statements):
        return _cluster_with_patterns(statements, vectors, p, level=level, node=node, prefix=prefix)
    dd = deduplicate([s.text for s in statements], vectors, near_threshold=p.near_duplicate_threshold,
                     random_state=p.random_state)
    labels, n_units = _group_labels(dd, p)
    members = dd.members()
    clusters: list[Cluster] = []
    other_rows: list[np.ndarray] = []
    counts = dd.count.astype(np.float64)
    k = int(labels.max()) + 1 if len(labels) else 0
    groups_of = _split_by_label(labels, k)
    other_rows.extend(members[gi] for gi in np.flatnonzero(labels < 0))
    drafts: list[tuple[int, np.ndarray, np.ndarray]] = []
    for c in range(k):
        groups = groups_of[c]
        rows = np.concatenate([members[gi] for gi in groups]) if len(groups) else np.zeros(0, dtype=np.int64)
        traces = {statements[r].trace_id for r in rows}
        if len(rows) < p.min_cluster_size or len(traces) < p.min_traces:
            other_rows.append(rows)
            continue
        drafts.append((len(rows), groups, rows))
    # largest first; ties broken by first statement row, so ids are stable for a given input
    drafts.sort(key=lambda d: (-d[0], int(d[2].min())))
    for i, (_, groups, rows) in enumerate(drafts):
        rows = np.sort(rows)
        w = counts[groups]
        mean = (dd.vectors[groups].astype(np.float64) * w[:, None]).sum(0) / w.sum()
        centroid = (mean / (np.linalg.norm(mean) or 1.0)).astype(np.float32)
        sims = dd.vectors[groups] @ centroid
        ranked = groups[np.lexsort((dd.rep[groups], -sims))]
        clusters.append(Cluster(
            id=f"{prefix}{i}", level=level, node=node,
            member_ids=[statements[r].id for r in rows],
            centroid=centroid,
            medoid_id=statements[int(dd.rep[ranked[0]])].id,
            size=len(rows),
            distinct_count=int(dd.distinct[groups].sum()),
            cohesion=float((sims * w).sum() / w.sum()),
            example_ids=[statements[int(dd.rep[gi])].id for gi in ranked[: p.n_examples]],
            trace_ids=sorted({statements[r].trace_id for r in rows}),
            nodes=dict(Counter(statements[r].node for r in rows).most_common()),
            severities=dict(Counter(statements[r].severity for r in rows).most_common()),
        ))
    other = sorted((int(r) for part in other_rows for r in part))
    assignment: dict[str, str | None] = {s.id: None for s in statements}
    for c_ in clusters:
        for sid in c_.member_ids:
            assignment[sid] = c_.id
    return ClusteringResult(
        clusters=clusters, other=[statements[r].id for r in other], assignment=assignment,
        n_statements=n, n_groups=dd.n_groups, n_units=n_units, params=p,
    )


def _split_by_label(labels: np.ndarray, k: int) -> list[np.ndarray]:
    idx = np.flatnonzero(labels >= 0)
    order = idx[np.argsort(labels[idx], kind="stable")]
    bounds = np.searchsorted(labels[order], np.arange(k + 1))
    return [order[bounds[c]:bounds[c + 1]] for c in range(k)]


def _cluster_from_rows(rows: np.ndarray, statements: Sequence[Statement], vectors: np.ndarray, *, level: str,
                       node: str, n_examples: int) -> Cluster:
    """A cluster over these rows: centroid the mean vector, medoid and examples the distinct texts nearest it."""
    from .statements import normalize_text

    rows = np.sort(rows)
    mean = vectors[rows].astype(np.float64).mean(axis=0)
    centroid = (mean / (np.linalg.norm(mean) or 1.0)).astype(np.float32)
    sims = vectors[rows] @ centroid
    examples: list[str] = []
    seen: set[str] = set()
    for j in np.lexsort((rows, -sims)):
        text = normalize_text(statements[rows[j]].text)
        if text not in seen:
            seen.add(text)
            examples.append(statements[rows[j]].id)
    return Cluster(
        id="", level=level, node=node, member_ids=[statements[r].id for r in rows], centroid=centroid,
        medoid_id=examples[0], size=len(rows), distinct_count=len(seen), cohesion=float(sims.mean()),
        example_ids=examples[:n_examples], trace_ids=sorted({statements[r].trace_id for r in rows}),
        nodes=dict(Counter(statements[r].node for r in rows).most_common()),
        severities=dict(Counter(statements[r].severity for r in rows).most_common()),
    )


def _cluster_with_patterns(statements: Sequence[Statement], vectors: np.ndarray, p: ClusterParams, *, level: str,
                           node: str, prefix: str) -> ClusteringResult:
    """One cluster per pattern (module docstring), the statements without one clustered as usual; ids by size."""
    plain = [i for i, s in enumerate(statements) if not s.pattern]
    by_pattern: dict[str, list[int]] = {}
    for i, s in enumerate(statements):
        if s.pattern:
            by_pattern.setdefault(s.pattern, []).append(i)
    drafts: list[Cluster] = []
    other: list[str] = []
    n_groups = n_units = 0
    if plain:
        result = cluster_statements([statements[i] for i in plain], vectors[plain], params=p, level=level,
                                    node=node, id_prefix="")
        drafts += result.clusters
        other += result.other
        n_groups, n_units = result.n_groups, result.n_units
    for rows in by_pattern.values():
        n_groups += 1
        n_units += 1
        if len(rows) < p.min_cluster_size or len({statements[r].trace_id for r in rows}) < p.min_traces:
            other += [statements[r].id for r in rows]
            continue
        drafts.append(_cluster_from_rows(np.asarray(rows), statements, vectors, level=level, node=node,
                                         n_examples=p.n_examples))
    row_of = {s.id: i for i, s in enumerate(statements)}
    # largest first; ties broken by first statement row, so ids are stable for a given input
    drafts.sort(key=lambda c: (-c.size, min(row_of[m] for m in c.member_ids)))
    assignment: dict[str, str | None] = {s.id: None for s in statements}
    for i, cluster in enumerate(drafts):
        cluster.id = f"{prefix}{i}"
        cluster.member_ids.sort(key=row_of.__getitem__)
        assignment.update(dict.fromkeys(cluster.member_ids, cluster.id))
    return ClusteringResult(
        clusters=drafts, other=sorted(other, key=row_of.__getitem__), assignment=assignment,
        n_statements=len(statements), n_groups=n_groups, n_units=n_units, params=p,
    )
