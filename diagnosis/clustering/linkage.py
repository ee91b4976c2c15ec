"""Weighted average-linkage (UPGMA) clustering under cosine similarity, cut at a threshold, without n x n
matrices over statements.

For unit vectors the average cosine similarity between two groups of statements is the dot product of their
(unnormalised) mean vectors: mean_{a in A, b in B} a.b = mean(A) . mean(B). So a group of statements can be
represented exactly by its mean vector and its weight (statement count), and average linkage over micro-clusters
with those weights is exactly average linkage over the statements they hold *between* micro-clusters (the
split inside a micro-cluster is taken as given). sklearn/scipy linkage cannot take weights (every input is one
observation), which makes micro-centroids look closer to each other than their statements are; hence this
module.

The algorithm is the nearest-neighbour chain (exact for reducible linkages such as average linkage) on an
m x m similarity matrix over the m units (m <= a few thousand: micro-clusters or deduplicated groups), with
one shortcut: a unit whose best similarity is below the threshold can never merge again (the similarity to a
merged group is a weighted average of the similarities to its parts), so it is retired at once.
"""

from __future__ import annotations

import numpy as np

__all__ = ["average_linkage_cut", "micro_clusters"]


def average_linkage_cut(means: np.ndarray, weights: np.ndarray, min_similarity: float) -> np.ndarray:
    """Flat clusters of weighted UPGMA cut where the average similarity drops below `min_similarity`.

    means: (m, d) mean vectors of the units (mean of unit-length statement vectors, not renormalised).
    weights: (m,) statement count of each unit.
    Returns labels (m,) numbered 0..k-1 in order of first appearance.
    """
    m = len(means)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    if m == 1:
        return np.zeros(1, dtype=np.int64)
    sim = (means.astype(np.float64) @ means.T.astype(np.float64)).astype(np.float64)
    np.fill_diagonal(sim, -np.inf)
    size = weights.astype(np.float64).copy()
    parent = np.arange(m)
    active = np.ones(m, dtype=bool)
    remaining = m
    chain: list[int] = []
    next_start = 0
    while remaining > 1:
        if not chain:
            while next_start < m and not active[next_start]:
                next_start += 1
            if next_start >= m:
                break
            chain.append(next_start)
        x = chain[-1]
        row = sim[x]
        y = int(np.argmax(row))
        best = row[y]
        if len(chain) > 1 and row[chain[-2]] >= best:  # prefer the predecessor on ties: keeps the chain finite
            y = chain[-2]
            best = row[y]
        if best < min_similarity or not np.isfinite(best):  # x can never merge again: retire it
            chain.pop()
            sim[x, :] = -np.inf
            sim[:, x] = -np.inf
            active[x] = False
            remaining -= 1
            continue
        if len(chain) > 1 and y == chain[-2]:  # reciprocal nearest neighbours: merge y into x
            chain.pop()
            chain.pop()
            merged = (size[x] * sim[x] + size[y] * sim[y]) / (size[x] + size[y])
            sim[x, :] = merged
            sim[:, x] = merged
            sim[x, x] = -np.inf
            sim[y, :] = -np.inf
            sim[:, y] = -np.inf
            size[x] += size[y]
            active[y] = False
            parent[y] = x
            remaining -= 1
        else:
            chain.append(y)
    # resolve the merge forest (parent pointers only point to units merged later or still alive)
    root = parent.copy()
    for _ in range(64):
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    _, labels = np.unique(root, return_inverse=True)
    # renumber by first appearance for determinism independent of unique's sort
    order: dict[int, int] = {}
    out = np.empty(m, dtype=np.int64)
    for i, lab in enumerate(labels):
        out[i] = order.setdefault(int(lab), len(order))
    return out


def micro_clusters(
    vectors: np.ndarray, weights: np.ndarray, k: int, *, random_state: int = 0, batch_size: int = 4096,
) -> np.ndarray:
    """Mini-batch k-means (Euclidean on unit vectors = cosine) into k micro-clusters; returns labels (n,),
    renumbered 0..k'-1 over the non-empty micro-clusters. Random init from the data and few epochs: the
    micro-clusters only need to be tight, not optimal, and k-means++ over thousands of centres costs
    more than the rest of the pipeline."""
    from sklearn.cluster import MiniBatchKMeans

    n = len(vectors)
    k = max(1, min(k, n))
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    km = MiniBatchKMeans(
        n_clusters=k, init="random", n_init=1, batch_size=max(batch_size, 3 * k), max_iter=20,
        max_no_improvement=5, reassignment_ratio=0.01, random_state=random_state,
    )
    km.fit(vectors, sample_weight=weights)
    labels = km.predict(vectors)
    _, labels = np.unique(labels, return_inverse=True)
    return labels.astype(np.int64)
