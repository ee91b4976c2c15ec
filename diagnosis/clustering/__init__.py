"""Pure clustering library for judge feedback (DESIGN.md §6): statements -> embeddings -> deduplicated clusters
per node and system-wide -> names, statistics and identity across runs. Plain data in, plain data out; no
Django. The method and every parameter: METHOD.md beside this file.

Submodules are imported lazily, so `import diagnosis.clustering` does not load numpy, scikit-learn or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Statement": "statements", "split_critique": "statements", "statements_from_critique": "statements",
    "normalize_text": "statements", "canonical_text": "statements",
    "Embedder": "embeddings", "EmbeddingCache": "embeddings", "InMemoryCache": "embeddings",
    "default_model_path": "embeddings",
    "Dedup": "dedup", "deduplicate": "dedup",
    "Cluster": "cluster", "ClusterParams": "cluster", "ClusteringResult": "cluster",
    "cluster_statements": "cluster", "MultiLevelClustering": "levels", "NodeLink": "levels",
    "cluster_per_node_and_system": "levels", "system_by_problem": "problems",
    "ClusterName": "naming", "NamingRequest": "naming", "LLMNamer": "naming", "name_clusters": "naming",
    "distinctive_terms": "naming",
    "TraceInfo": "stats", "IssueStats": "stats", "ReleaseCount": "stats", "issue_stats": "stats",
    "trend_by_release": "stats", "wilson_interval": "stats", "risk_ratio": "stats", "newcombe_difference": "stats",
    "ClusterRef": "identity", "InsightRef": "identity", "Match": "identity", "fingerprint": "identity",
    "match_clusters_to_insights": "identity",
    "Analysis": "pipeline", "analyse": "pipeline", "embed_statements": "pipeline",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'diagnosis.clustering' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
