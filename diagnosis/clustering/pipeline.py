"""End to end, in memory: statements -> vectors -> node and system clusters -> names (+ fingerprints).

This is what the insight layer calls; it owns no storage. Embedding happens once per distinct normalised text
(`normalize_text`): statements with the same key share one vector, which is what makes large, repetitive
feedback sets cheap (dedup before embedding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cluster import ClusterParams
from .dedup import exact_groups
from .embeddings import Embedder
from .identity import fingerprint
from .levels import MultiLevelClustering, cluster_per_node_and_system
from .naming import ClusterName, LLMNamer, name_clusters
from .statements import Statement, canonical_text

__all__ = ["Analysis", "embed_statements", "analyse"]


@dataclass(slots=True)
class Analysis:
    clustering: MultiLevelClustering
    names: dict[str, ClusterName]  # cluster id -> name, both levels
    fingerprints: dict[str, str]  # cluster id -> identity fingerprint
    vectors: np.ndarray  # one row per input statement
    n_embedded: int  # distinct canonical texts sent to the embedder (cached ones included)


def embed_statements(statements: Sequence[Statement], embedder: Embedder) -> tuple[np.ndarray, int]:
    """One vector per statement. Statements with the same `normalize_text` key share a vector, computed from
    the `canonical_text` of the key's first statement; the embedder computes each distinct canonical text
    once (and not at all when cached). Returns (vectors, number of distinct canonical texts)."""
    texts = [s.text for s in statements]
    first, inverse, _ = exact_groups(texts)
    canonical = [canonical_text(texts[i]) for i in first]
    unique = embedder.embed(canonical)
    return unique[inverse], len(set(canonical))


def analyse(
    statements: Sequence[Statement],
    embedder: Embedder,
    *,
    params: ClusterParams | None = None,
    node_params: ClusterParams | None = None,
    llm: LLMNamer | None = None,
    vectors: np.ndarray | None = None,
) -> Analysis:
    """Embed (unless `vectors` are given), cluster per node and system-wide, name every cluster."""
    n_embedded = 0
    if vectors is None:
        vectors, n_embedded = embed_statements(statements, embedder)
    clustering = cluster_per_node_and_system(statements, vectors, params=params, node_params=node_params)
    texts = {s.id: s.text for s in statements}
    names: dict[str, ClusterName] = {}
    for clusters in [*clustering.node_clusters.values(), clustering.system_clusters]:
        names.update(name_clusters(clusters, texts, llm=llm))
    fingerprints = {}
    for c in [*(c for cs in clustering.node_clusters.values() for c in cs), *clustering.system_clusters]:
        fingerprints[c.id] = fingerprint(names[c.id].terms, c.node, c.level)
    return Analysis(clustering=clustering, names=names, fingerprints=fingerprints, vectors=vectors,
                    n_embedded=n_embedded)
