"""Which existing insight each newly judged statement joins, between two full builds (a continuous refresh).

A full build clusters the statements, then matches each cluster to the project's insights (identity.py:
groups_assign, centroid cosine >= CLEAR_INSIGHT_IDENTITY_THRESHOLD, merges followed, split families divided). A
refresh puts each new statement through that same groups_assign as a cluster of its own, its vector its centroid,
at each level it takes part in (a node statement at its node and system-wide; a node "" statement system-wide only).
A statement that clears the threshold joins the insight a full build would match its cluster to; one that does not
joins nothing here and waits for the next full re-clustering, which alone creates insights. No fingerprint: a single
statement has no cluster name to take one from, so only the cosine rule applies (the stricter of the two).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnosis.insights.identity import Known, groups_assign
from diagnosis.insights.statements import Draft

NODE, SYSTEM = "node", "system"  # Insight.Level values, as the clustering library names its levels


@dataclass(slots=True)
class _Single:
    """A statement dressed as the clustering library's Cluster, as far as groups_assign reads one."""

    id: str
    level: str
    node: str
    centroid: np.ndarray


@dataclass(slots=True)
class Assigned:
    node_insight: int | None = None
    system_insight: int | None = None

    @property
    def joined(self) -> bool:
        return self.node_insight is not None or self.system_insight is not None


def statements_assign(*, drafts: list[Draft], vectors: np.ndarray, known: list[Known],
                      threshold: float | None = None) -> list[Assigned]:
    """One Assigned per draft, in order; None at a level: the statement waits for a full re-clustering."""
    by_scope: dict[tuple[str, str], list[Known]] = {}
    for k in known:
        by_scope.setdefault((k.level, k.node), []).append(k)
    out: list[Assigned] = []
    memo: dict[tuple[str, str, bytes], int | None] = {}
    for row, draft in enumerate(drafts):
        assigned = Assigned()
        scopes = [(NODE, draft.node), (SYSTEM, "")] if draft.node else [(SYSTEM, "")]
        for level, node in scopes:
            candidates = by_scope.get((level, node))
            if not candidates:
                continue
            memo_key = (level, node, vectors[row].tobytes())  # repeated texts share one vector and one answer
            if memo_key not in memo:
                single = _Single(id=f"s{row}", level=level, node=node, centroid=vectors[row])
                groups = groups_assign(clusters=[single], fingerprints={}, rows_of={single.id: [row]},
                                       vectors=vectors, known=candidates, other_rows={}, threshold=threshold)
                memo[memo_key] = next((g.insight_id for g in groups if g.insight_id is not None), None)
            if level == NODE:
                assigned.node_insight = memo[memo_key]
            else:
                assigned.system_insight = memo[memo_key]
        out.append(assigned)
    return out
