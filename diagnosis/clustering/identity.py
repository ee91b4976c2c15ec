"""Stable insight identity across runs: match this run's clusters to existing insights.

Primary key: centroid cosine. Candidates are restricted to the same level and node (a node cluster only
inherits a node insight of the same node). All candidate pairs with cosine >= `threshold` are sorted by
cosine (descending; ties by ids) and taken greedily, one-to-one: the best pair first, then the best pair among
the remaining ones, and so on. Default threshold 0.8 (see METHOD.md): re-clustering the same problem from a
different sample of statements gives centroid cosines of ~0.9 and above, while distinct problems of one
agent stay below ~0.65 with all-MiniLM-L6-v2; 0.8 sits between with margin on both sides, and stays below
the in-run cluster merge threshold (0.85), so two insights that would be merged today are never both
inherited by one cluster.

Secondary key: a fingerprint, sha1 of level, node and the sorted top distinctive terms. A cluster left
unmatched by centroid inherits an unmatched insight of the same level/node with the same fingerprint, if the
centroid cosine is at least `fingerprint_floor` (it guards against two unrelated clusters that share terms).
Still unmatched clusters are new insights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["ClusterRef", "InsightRef", "Match", "fingerprint", "match_clusters_to_insights", "IDENTITY_THRESHOLD"]

IDENTITY_THRESHOLD = 0.8
FINGERPRINT_FLOOR = 0.6
FINGERPRINT_TERMS = 5


class ClusterRef(NamedTuple):
    """A cluster of this run: its id (any key), centroid (unit vector), node ("" at system level), level,
    and fingerprint ("" if unknown)."""

    key: str
    centroid: np.ndarray
    node: str
    level: str
    fingerprint: str = ""


class InsightRef(NamedTuple):
    """An existing insight: the same fields, as stored after earlier runs."""

    insight_id: str
    centroid: np.ndarray
    node: str
    level: str
    fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class Match:
    """insight_id None = a new insight. via: "centroid", "fingerprint" or "new"."""

    insight_id: str | None
    similarity: float
    via: str


def fingerprint(terms: Sequence[str], node: str, level: str, *, n_terms: int = FINGERPRINT_TERMS) -> str:
    """sha1 hex of "level|node|t1,t2,..." with the first `n_terms` distinctive terms, sorted."""
    top = sorted(t.strip().lower() for t in list(terms)[:n_terms])
    return hashlib.sha1(f"{level}|{node}|{','.join(top)}".encode()).hexdigest()


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64).ravel()
    n = np.linalg.norm(v)
    return v / n if n else v


def match_clusters_to_insights(
    new: Sequence[ClusterRef | tuple],
    existing: Sequence[InsightRef | tuple],
    *,
    threshold: float = IDENTITY_THRESHOLD,
    fingerprint_floor: float = FINGERPRINT_FLOOR,
) -> dict[str, Match]:
    """Map each new cluster key to a Match (an existing insight or a new one), one-to-one.

    new: ClusterRef or tuples (key, centroid, node, level[, fingerprint]).
    existing: InsightRef or tuples (insight_id, centroid, node, level[, fingerprint]).
    """
    news = [c if isinstance(c, ClusterRef) else ClusterRef(*c) for c in new]
    olds = [e if isinstance(e, InsightRef) else InsightRef(*e) for e in existing]
    result: dict[str, Match] = {c.key: Match(None, 0.0, "new") for c in news}
    groups: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for i, c in enumerate(news):
        groups.setdefault((c.level, c.node), ([], []))[0].append(i)
    for j, e in enumerate(olds):
        if (e.level, e.node) in groups:
            groups[(e.level, e.node)][1].append(j)
    for ni, oi in groups.values():
        if not oi:
            continue
        a = np.stack([_unit(news[i].centroid) for i in ni])
        b = np.stack([_unit(olds[j].centroid) for j in oi])
        sim = a @ b.T
        pairs = [(float(sim[x, y]), news[ni[x]].key, olds[oi[y]].insight_id, x, y)
                 for x, y in zip(*np.nonzero(sim >= threshold))]
        pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
        used_new: set[int] = set()
        used_old: set[int] = set()
        for s, key, insight_id, x, y in pairs:
            if x in used_new or y in used_old:
                continue
            used_new.add(x)
            used_old.add(y)
            result[key] = Match(insight_id, s, "centroid")
        # secondary: fingerprint among the leftovers
        by_fp: dict[str, list[int]] = {}
        for y, j in enumerate(oi):
            if y not in used_old and olds[j].fingerprint:
                by_fp.setdefault(olds[j].fingerprint, []).append(y)
        for x, i in enumerate(ni):
            fp = news[i].fingerprint
            if x in used_new or not fp or fp not in by_fp:
                continue
            cands = [y for y in by_fp[fp] if y not in used_old and sim[x, y] >= fingerprint_floor]
            if not cands:
                continue
            y = max(cands, key=lambda y_: (sim[x, y_], -y_))
            used_old.add(y)
            used_new.add(x)
            result[news[i].key] = Match(olds[oi[y]].insight_id, float(sim[x, y]), "fingerprint")
    return result
