"""Collapse exact and near-duplicate statements before clustering, keeping counts and members.

1. Exact: statements with the same `normalize_text` key (case, quotes, numbers/ids, whitespace and trailing
   punctuation ignored) form one group.
2. Near: the exact groups' vectors are grouped when their cosine is >= `near_threshold` (default 0.95).
   Candidates come from nearest neighbours inside coarse k-means cells (cells of ~`cell_size` vectors), never
   from an n x n matrix: within a cell the similarities are one small block product, and a leader pass
   (most frequent text first) attaches each text to the first leader it is near, so groups cannot chain.
   Two near duplicates that k-means puts in different cells are missed; that only costs a little speed
   downstream, because clustering puts them together anyway.

Everything is index based (positions in the caller's lists); `Dedup.members(g)` gives a group's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from .statements import normalize_text

__all__ = ["Dedup", "deduplicate", "exact_groups", "near_duplicate_leaders", "NEAR_DUPLICATE_THRESHOLD"]

NEAR_DUPLICATE_THRESHOLD = 0.95
"""all-MiniLM-L6-v2 gives >= 0.95 to rewordings that differ by a word or two ("the agent never verified the
order id" / "the agent did not verify the order id"); distinct problems, even closely related ones, stay
below ~0.9. A near-duplicate group is treated as one text with a count."""
CELL_SIZE = 512
EXACT_MAX = 4096  # up to this many vectors, one cell (a 4096 x 4096 block is 64 MB)


@dataclass(slots=True)
class Dedup:
    """Groups of duplicate statements. `group_of[i]` is the group of row i; per group g: `rep[g]` the row of
    its representative (most frequent text, then first seen), `count[g]` rows incl. duplicates,
    `distinct[g]` distinct normalised texts, `vectors[g]` the count-weighted mean vector, L2-normalised."""

    group_of: np.ndarray
    rep: np.ndarray
    count: np.ndarray
    distinct: np.ndarray
    vectors: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.rep)

    def members(self) -> list[np.ndarray]:
        """Rows of each group, in row order."""
        order = np.argsort(self.group_of, kind="stable")
        bounds = np.searchsorted(self.group_of[order], np.arange(self.n_groups + 1))
        return [order[bounds[g]:bounds[g + 1]] for g in range(self.n_groups)]


def exact_groups(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first row of each key, key index of each row, rows per key) for the `normalize_text` keys."""
    index: dict[str, int] = {}
    inverse = np.empty(len(texts), dtype=np.int64)
    first: list[int] = []
    for i, text in enumerate(texts):
        key = normalize_text(text)
        k = index.get(key)
        if k is None:
            k = index[key] = len(first)
            first.append(i)
        inverse[i] = k
    counts = np.bincount(inverse, minlength=len(first)) if len(texts) else np.zeros(0, dtype=np.int64)
    return np.asarray(first, dtype=np.int64), inverse, counts


def _cells(vectors: np.ndarray, cell_size: int, random_state: int) -> list[np.ndarray]:
    """Split row indices into cells of about `cell_size` nearby vectors (recursive mini-batch k-means)."""
    n = len(vectors)
    if n <= EXACT_MAX:
        return [np.arange(n)]
    from sklearn.cluster import MiniBatchKMeans

    out: list[np.ndarray] = []
    stack: list[np.ndarray] = [np.arange(n)]
    depth = 0
    while stack:
        rows = stack.pop()
        if len(rows) <= EXACT_MAX or depth > 64:
            out.append(rows)
            continue
        depth += 1
        k = max(2, min(len(rows) // cell_size, 4096))
        km = MiniBatchKMeans(n_clusters=k, init="random", n_init=1, batch_size=4096, max_iter=10,
                             random_state=random_state, max_no_improvement=3)
        labels = km.fit_predict(vectors[rows])
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(k + 1))
        parts = [rows[order[bounds[c]:bounds[c + 1]]] for c in range(k)]
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:  # k-means could not split (identical vectors): stop here
            out.append(parts[0])
            continue
        for p in parts:
            (stack if len(p) > EXACT_MAX else out).append(p)
    return out


def near_duplicate_leaders(
    vectors: np.ndarray, weights: np.ndarray, *, threshold: float = NEAR_DUPLICATE_THRESHOLD,
    cell_size: int = CELL_SIZE, random_state: int = 0,
) -> np.ndarray:
    """For each row, the row of its leader (itself if it leads): the heaviest row it has cosine >= threshold
    with inside its cell, leaders taken in order of decreasing weight."""
    n = len(vectors)
    leader = np.arange(n)
    if n < 2 or threshold > 1.0:
        return leader
    for rows in _cells(vectors, cell_size, random_state):
        if len(rows) < 2:
            continue
        rows = rows[np.lexsort((rows, -weights[rows]))]  # heaviest first, then by row
        sims = vectors[rows] @ vectors[rows].T
        is_leader = np.zeros(len(rows), dtype=bool)
        leaders: list[int] = []
        for j in range(len(rows)):
            if leaders:
                cand = sims[j, leaders]
                best = int(np.argmax(cand))
                if cand[best] >= threshold:
                    leader[rows[j]] = rows[leaders[best]]
                    continue
            is_leader[j] = True
            leaders.append(j)
    return leader


def deduplicate(
    texts: Sequence[str], vectors: np.ndarray, *, near_threshold: float = NEAR_DUPLICATE_THRESHOLD,
    cell_size: int = CELL_SIZE, random_state: int = 0,
) -> Dedup:
    """Group rows that are exact duplicates (normalised text) or near duplicates (cosine >= near_threshold).
    `vectors` must be L2-normalised, one row per text. Pass near_threshold > 1 to skip the near pass."""
    n = len(texts)
    if vectors.shape[0] != n:
        raise ValueError(f"{n} texts but {vectors.shape[0]} vectors")
    first, key_of, key_count = exact_groups(texts)
    key_vecs = vectors[first]
    lead = near_duplicate_leaders(key_vecs, key_count.astype(np.float64), threshold=near_threshold,
                                  cell_size=cell_size, random_state=random_state)
    leaders, key_group = np.unique(lead, return_inverse=True)
    group_of = key_group[key_of]
    n_groups = len(leaders)
    count = np.bincount(group_of, minlength=n_groups)
    distinct = np.bincount(key_group, minlength=n_groups)
    rep = first[leaders]
    weights = csr_matrix((key_count.astype(np.float64), (key_group, np.arange(len(first)))),
                         shape=(n_groups, len(first)))
    sums = np.asarray(weights @ key_vecs.astype(np.float64))
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return Dedup(group_of=group_of, rep=rep, count=count, distinct=distinct,
                 vectors=(sums / norms).astype(np.float32))
