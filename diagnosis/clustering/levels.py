"""Both levels at once: node clusters per node, system clusters as problems (problems.py), and which node clusters
each system cluster contains."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .cluster import NODE_LEVEL, SYSTEM_LEVEL, Cluster, ClusteringResult, ClusterParams, cluster_statements
from .cooccurrence import merge_cooccurring
from .problems import system_by_problem
from .statements import Statement

__all__ = ["MultiLevelClustering", "NodeLink", "cluster_per_node_and_system"]


@dataclass(frozen=True, slots=True)
class NodeLink:
    """A node cluster contained in a system cluster: `shared` statements are in both, which is `share` of
    the node cluster's statements."""

    node: str
    node_cluster_id: str
    shared: int
    share: float


@dataclass(slots=True)
class MultiLevelClustering:
    """Node-level results per node, the system-level result, and system cluster id -> contained node
    clusters. Unpacks as `node_clusters, system_clusters, links = cluster_per_node_and_system(...)`."""

    node_results: dict[str, ClusteringResult]
    system_result: ClusteringResult
    links: dict[str, list[NodeLink]]

    @property
    def node_clusters(self) -> dict[str, list[Cluster]]:
        return {node: r.clusters for node, r in self.node_results.items()}

    @property
    def system_clusters(self) -> list[Cluster]:
        return self.system_result.clusters

    def __iter__(self) -> Iterator[object]:
        return iter((self.node_clusters, self.system_clusters, self.links))


def cluster_per_node_and_system(
    statements: Sequence[Statement],
    vectors: np.ndarray,
    *,
    params: ClusterParams | None = None,
    node_params: ClusterParams | None = None,
    link_min_share: float = 0.5,
    started: Mapping[str, float] | None = None,
) -> MultiLevelClustering:
    """Node-level clusters for each non-empty node (statements with node "" are trace-level and only take
    part at system level), system-level clusters as problems (problems.py: candidates over all statements, split
    by root cause, twins of one node cluster dropped), co-occurring patterns made one problem (cooccurrence.py;
    `started`: statement id -> start time of the span it cites, to name a problem after its first symptom), and
    links: a node cluster is linked to
    every system cluster holding >= `link_min_share` of its statements (with the default 0.5, at most one).
    The same vectors serve both levels; nothing is embedded twice."""
    vectors = np.asarray(vectors, dtype=np.float32)
    by_node: dict[str, list[int]] = {}
    for i, s in enumerate(statements):
        if s.node:
            by_node.setdefault(s.node, []).append(i)
    node_results: dict[str, ClusteringResult] = {}
    for node in sorted(by_node):
        rows = by_node[node]
        node_results[node] = cluster_statements(
            [statements[i] for i in rows], vectors[rows], params=node_params or params, level=NODE_LEVEL,
            node=node,
        )
    candidates = cluster_statements(statements, vectors, params=params, level=SYSTEM_LEVEL)
    system = system_by_problem(statements, vectors, node_results=node_results, candidates=candidates,
                               params=params)
    node_results, system = merge_cooccurring(statements, vectors, node_results=node_results, system=system,
                                             started=started, params=params)
    links: dict[str, list[NodeLink]] = {c.id: [] for c in system.clusters}
    for node, result in node_results.items():
        for nc in result.clusters:
            hits = Counter(system.assignment.get(sid) for sid in nc.member_ids)
            for sys_id, shared in hits.most_common():
                if sys_id is None:
                    continue
                share = shared / nc.size
                if share >= link_min_share:
                    links[sys_id].append(NodeLink(node=node, node_cluster_id=nc.id, shared=shared, share=share))
    for v in links.values():
        v.sort(key=lambda link: (-link.shared, link.node_cluster_id))
    return MultiLevelClustering(node_results=node_results, system_result=system, links=links)
