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
    return {str(pk): info for pk, _, info in _judged_rows(run)}


def _judged_rows(run: DiagnosisRun):
    """(trace pk, trace id, TraceInfo) for every trace the run judged (judged_traces says why `failed`)."""
    from diagnosis.clustering import TraceInfo

    rows = RunTrace.objects.filter(run=run, status=RunTrace.Status.DONE).values_list(
        "trace_id", "trace__trace_id", "trace__release", "trace__outcome")
    for pk, trace_id, release, outcome in rows:
        yield pk, trace_id, TraceInfo(failed=(outcome == "failure") if outcome else None, release=release or "")


def judged_totals(*, run: DiagnosisRun, window: set[int]) -> JudgedTotals:
    """The window's judged traces by trace id (occurrence_extend) and by pk (occurrence_recompute), one query."""
    by_tid, by_pk = {}, {}
    for pk, trace_id, info in _judged_rows(run):
        if pk in window:
            by_tid[trace_id] = by_pk[str(pk)] = info
    return JudgedTotals(by_tid, by_pk)


def _field(insight: Insight) -> str:
    return "node_insight" if insight.level == Insight.Level.NODE else "system_insight"


def statements_of(insight: Insight, run_id=None):
    rows = InsightStatement.objects.filter(excluded=False, **{_field(insight): insight})
    return rows.filter(run_id=run_id) if run_id is not None else rows


def occurrence_recompute(*, insight: Insight, run: DiagnosisRun, judged: dict | None = None) -> InsightOccurrence | None:
    """judged: the run's judged_traces when the caller has them (one read for many insights)."""
    from diagnosis.clustering import issue_stats

    rows = list(statements_of(insight, run.pk).values_list("trace_id", "trace__trace_id", "trace__release"))
    if not rows:
        InsightOccurrence.objects.filter(insight=insight, run=run).delete()
        return None
    stats = issue_stats({str(pk) for pk, _, _ in rows}, judged_traces(run) if judged is None else judged)
    releases = Counter(release or "" for _, release in {(pk, release) for pk, _, release in rows})
    occurrence, _ = InsightOccurrence.objects.update_or_create(insight=insight, run=run, defaults={
        "count": len(rows), "trace_count": stats.count, "judged": stats.judged, "frequency": stats.frequency,
        "lift": stats.lift, "lift_low": stats.lift_ci[0] if stats.lift_ci else None,
        "lift_high": stats.lift_ci[1] if stats.lift_ci else None,
        "trace_ids": sorted({tid for _, tid, _ in rows}), "releases": dict(releases)})
    return occurrence


class JudgedTotals:
    """A run's judged traces keyed by trace id (the key of InsightOccurrence.trace_ids), with the totals issue_stats
    counts over all of them, so a refresh's figures cost in proportion to an insight's traces, not the run's."""

    def __init__(self, traces: dict, by_pk: dict) -> None:
        self.traces, self.by_pk = traces, by_pk  # by_pk: the same, keyed as judged_traces (occurrence_recompute)
        self.judged = len(traces)
        self.known = sum(1 for info in traces.values() if info.failed is not None)
        self.failed = sum(1 for info in traces.values() if info.failed)


def occurrence_extend(*, insight: Insight, run: DiagnosisRun, added: list[tuple[str, str]],
                      totals: JudgedTotals) -> InsightOccurrence | None:
    """A refresh joined statements to the insight in this run (added: (trace id, release) per statement): its
    occurrence grows without reading the statements it held. Same figures as occurrence_recompute over the same
    judged traces (no statement was taken out: only a re-clustering moves statements)."""
    from diagnosis.clustering.stats import issue_lift

    occurrence = InsightOccurrence.objects.filter(insight=insight, run=run).first()
    if occurrence is None:
        return None
    traces = set(occurrence.trace_ids or [])
    releases = Counter(occurrence.releases or {})
    for trace_id, release in dict(added).items():
        if trace_id not in traces:
            traces.add(trace_id)
            releases[release or ""] += 1
    hit = [totals.traces[t] for t in traces if t in totals.traces]
    n1 = sum(1 for info in hit if info.failed is not None)
    a = sum(1 for info in hit if info.failed)
    lift, lift_ci = issue_lift(a, n1, totals.failed - a, totals.known - n1)
    occurrence.count += len(added)
    occurrence.trace_count, occurrence.judged = len(hit), totals.judged
    occurrence.frequency = len(hit) / totals.judged if totals.judged else 0.0
    occurrence.lift = lift
    occurrence.lift_low, occurrence.lift_high = (lift_ci[0], lift_ci[1]) if lift_ci else (None, None)
    occurrence.trace_ids, occurrence.releases = sorted(traces), dict(releases)
    occurrence.save(update_fields=["count", "trace_count", "judged", "frequency", "lift", "lift_low", "lift_high",
                                   "trace_ids", "releases"])
    return occurrence


def headline_extend(*, insight: Insight, occurrence: InsightOccurrence, nodes: list[str]) -> bool:
    """The headline figures after occurrence_extend, when they come from this run already; False: call
    headline_refresh. Severity stays until the next re-clustering."""
    if insight.last_run_id != occurrence.run_id:
        return False
    insight.count, insight.trace_count, insight.frequency = occurrence.count, occurrence.trace_count, \
        occurrence.frequency
    insight.lift, insight.lift_low, insight.lift_high = occurrence.lift, occurrence.lift_low, occurrence.lift_high
    affected = Counter(insight.affected_nodes or {})
    affected.update(node for node in nodes if node)
    insight.affected_nodes = dict(affected.most_common())
    return True


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
