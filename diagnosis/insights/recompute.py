"""Figures recomputed from stored statements after a person moves statements between insights (merge, split):
per-run occurrences, headline figures, centroids, fingerprints and terms, system↔node links."""

from __future__ import annotations

from collections import Counter

import numpy as np

from diagnosis.insights.embedding import centroid_bytes, vectors_for
from diagnosis.insights.persist import LINK_MIN_SHARE
from diagnosis.models import DiagnosisRun, Insight, InsightLink, InsightOccurrence, InsightStatement, RunTrace


def judged_traces(run: DiagnosisRun) -> dict:
    """str(trace pk) -> TraceInfo(failed, release) for every trace the run judged. `failed` is the recorded outcome,
    None when there is none: a judge's failing verdict is what an insight is made of, so counting it as a failure
    would make every insight look associated with failure."""
    from diagnosis.clustering import TraceInfo

    rows = RunTrace.objects.filter(run=run, status=RunTrace.Status.DONE).values_list(
        "trace_id", "trace__release", "trace__outcome")
    return {str(pk): TraceInfo(failed=(outcome == "failure") if outcome else None, release=release or "")
            for pk, release, outcome in rows}


def _field(insight: Insight) -> str:
    return "node_insight" if insight.level == Insight.Level.NODE else "system_insight"


def statements_of(insight: Insight, run_id=None):
    rows = InsightStatement.objects.filter(excluded=False, **{_field(insight): insight})
    return rows.filter(run_id=run_id) if run_id is not None else rows


def occurrence_recompute(*, insight: Insight, run: DiagnosisRun) -> InsightOccurrence | None:
    from diagnosis.clustering import issue_stats

    rows = list(statements_of(insight, run.pk).values_list("trace_id", "trace__trace_id", "trace__release"))
    if not rows:
        InsightOccurrence.objects.filter(insight=insight, run=run).delete()
        return None
    stats = issue_stats({str(pk) for pk, _, _ in rows}, judged_traces(run))
    releases = Counter(release or "" for _, release in {(pk, release) for pk, _, release in rows})
    occurrence, _ = InsightOccurrence.objects.update_or_create(insight=insight, run=run, defaults={
        "count": len(rows), "trace_count": stats.count, "judged": stats.judged, "frequency": stats.frequency,
        "lift": stats.lift, "lift_low": stats.lift_ci[0] if stats.lift_ci else None,
        "lift_high": stats.lift_ci[1] if stats.lift_ci else None,
        "trace_ids": sorted({tid for _, tid, _ in rows}), "releases": dict(releases)})
    return occurrence


def headline_refresh(*, insight: Insight) -> None:
    """Count, frequency, lift, nodes and severity from the best run the insight occurred in: as when a run's
    insights are written (headline.py), so a merge or split does not hand the figures to a gate's baseline run."""
    from diagnosis.insights.groups import group_severity
    from diagnosis.insights.headline import headline_ranker
    from diagnosis.insights.statements import Draft

    ranker = headline_ranker(project_id=insight.project_id)
    latest = max(InsightOccurrence.objects.filter(insight=insight).select_related("run"),
                 key=lambda o: ranker.rank(o.run), default=None)
    if latest is None:
        insight.count = insight.trace_count = 0
        insight.frequency = 0.0
        return
    insight.count, insight.trace_count, insight.frequency = latest.count, latest.trace_count, latest.frequency
    insight.lift, insight.lift_low, insight.lift_high = latest.lift, latest.lift_low, latest.lift_high
    insight.last_run = latest.run
    rows = list(statements_of(insight, latest.run_id).values_list("node", "severity"))
    insight.affected_nodes = dict(Counter(node for node, _ in rows if node).most_common())
    drafts = [Draft(0, 0, "", "", 0, "", "", node, "", "", severity) for node, severity in rows]
    insight.severity = group_severity(list(range(len(drafts))), drafts) if drafts else insight.severity


def centroid_recompute(*, insight: Insight) -> np.ndarray | None:
    """The centroid of the insight's statements in its latest run (all runs when it has none)."""
    rows = statements_of(insight, insight.last_run_id) if insight.last_run_id else statements_of(insight)
    pairs = list(rows.values_list("vector_key", "text")) or list(statements_of(insight).values_list("vector_key",
                                                                                                      "text"))
    if not pairs:
        return None
    vectors = vectors_for(keys=[k for k, _ in pairs], texts=[t for _, t in pairs])
    mean = vectors.astype(np.float64).mean(axis=0)
    insight.centroid = centroid_bytes(mean)
    return mean / (np.linalg.norm(mean) or 1.0)


def links_recompute(*, node_insight: Insight) -> None:
    """Links of a node-level insight to the system insights holding >= half its statements in its latest run."""
    run_id = node_insight.last_run_id
    rows = statements_of(node_insight, run_id) if run_id else statements_of(node_insight)
    systems = Counter(rows.exclude(system_insight=None).values_list("system_insight_id", flat=True))
    total = rows.count()
    keep = []
    for system_id, shared in systems.items():
        share = shared / total if total else 0.0
        if share >= LINK_MIN_SHARE:
            keep.append(system_id)
            InsightLink.objects.update_or_create(system_id=system_id, node=node_insight,
                                                 defaults={"shared": shared, "share": share, "run_id": run_id})
    InsightLink.objects.filter(node=node_insight).exclude(system_id__in=keep).delete()
