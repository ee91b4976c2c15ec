"""The insights of a run that is not full (a CI gate's, sampled or filtered: DiagnosisRun.writes_insights), kept on
the run and never written to the project's insights (issue 27, item 2).

Such a run sees a slice of the traces chosen by someone for one purpose; letting it create, merge or re-figure the
project's insights put a gate's release at the top of the Insights list and moved statements off the insights a full
run had built. Its clusters are matched to the stored insights by identity (identity.py) without the project's lock,
since nothing is written, and each resulting group with its figures goes into `insights_summary["groups"]`, where
compare (diagnosis/services/compare.py) reads the run. A group no stored insight matches keeps its centroid so that
compare can match it to a group of the other run by the same rule.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from diagnosis.insights.groups import group_severity
from diagnosis.insights.identity import Group
from diagnosis.insights.persist import other_title
from diagnosis.insights.statements import Draft

CENTROID_DECIMALS = 5  # enough for a cosine against the identity threshold; keeps the JSON small


def groups_detached(*, groups: list[Group], names: dict[int, tuple], drafts: list[Draft], traces: dict,
                    fingerprints: dict[int, str]) -> list[dict]:
    """One dict per group: the stored insight it is (None: none is), its title, level, node and severity, and its
    figures in the run as an InsightOccurrence would hold them."""
    from diagnosis.clustering import issue_stats

    rows = []
    system_rows = {index: set(g.rows) for index, g in enumerate(groups)
                   if g.level == "system" and not g.is_other}
    for index, group in enumerate(groups):
        stats = issue_stats({str(drafts[r].trace_pk) for r in group.rows}, traces)
        cluster, name = names.get(index, (None, None))
        centroid = None
        if group.insight_id is None and cluster is not None:
            centroid = [round(float(x), CENTROID_DECIMALS) for x in np.asarray(cluster.centroid).ravel()]
        releases = Counter(traces[str(t)].release for t in {drafts[r].trace_pk for r in group.rows}
                           if str(t) in traces)
        rows.append({
            "insight_id": group.insight_id, "is_other": group.is_other, "level": group.level, "node": group.node,
            "title": other_title(group.level, group.node) if group.is_other else (name.title[:300] if name else ""),
            "severity": group_severity(group.rows, drafts), "fingerprint": fingerprints.get(index, ""),
            "centroid": centroid, "via": group.via, "count": len(group.rows), "trace_count": stats.count,
            "judged": stats.judged, "frequency": stats.frequency, "lift": stats.lift,
            "trace_ids": sorted({drafts[r].trace_id for r in group.rows}), "releases": dict(releases),
            # a node group's statements in a system group: that problem holds it (as InsightLink does when written)
            "systems": [] if group.level == "system" else sorted(
                i for i, members in system_rows.items() if members & set(group.rows)),
        })
    return rows
