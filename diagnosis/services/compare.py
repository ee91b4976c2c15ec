"""Compare the insights of two diagnosis runs (or of the latest finished runs of two releases): new, resolved,
worse, better and unchanged, with their figures in both.

Insights are matched by identity, not by title: every run's clusters are resolved to the project's stored insights
when its insights are built (diagnosis/insights/identity.py), and the figures of insight I in run R are the
InsightOccurrence (I, R). A run that is not full (a CI gate's, sampled, filtered) writes no occurrence: its groups and
figures are kept on the run (diagnosis/insights/detached.py); those no stored insight matched are paired across
the two runs by the same identity rule and listed with no id. An insight with no occurrence in a run did not occur there (0 of that run's judged traces).

The rule, per insight, with f = traces with the insight / judged traces of the run:

* new: no trace of the base run has it, at least `min_traces` traces of the head run do;
* resolved: the base run has it, the head run does not;
* worse: both have it, f_head - f_base >= `min_delta`, and the difference is statistically meaningful: the lower
  bound of Newcombe's hybrid score interval for f_head - f_base (at `confidence`) is above 0;
* better: the mirror image (f_base - f_head >= min_delta and the interval's upper bound below 0);
* unchanged: anything else present in either run.

"Other" buckets (statements that fit no pattern), insights people rejected, and ignored insights are left out:
they are not problems a build should fail on. Merged-away insights count as the insight they were merged into.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from clear.errors import ClearError, ConflictError, NotFoundError
from clear.projects.models import Project
from diagnosis.clustering.stats import newcombe_difference
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.selectors import diagnosis_run_get, diagnosis_run_latest_finished, insight_occurrences_of_run

DEFAULT_MIN_DELTA = 0.05
DEFAULT_CONFIDENCE = 0.95
DEFAULT_MIN_TRACES = 1
CHANGES = ("new", "worse", "resolved", "better", "unchanged")
_SEVERITY_RANK = {s: i for i, s in enumerate(reversed(Insight.Severity.values))}  # critical first


class CompareInvalidError(ClearError):
    code = "compare_invalid"


class ReleaseNotDiagnosedError(NotFoundError):
    code = "release_not_diagnosed"


class InsightsNotReadyError(ConflictError):
    code = "insights_not_ready"


@dataclass(frozen=True, slots=True)
class Thresholds:
    min_delta: float = DEFAULT_MIN_DELTA
    confidence: float = DEFAULT_CONFIDENCE
    min_traces: int = DEFAULT_MIN_TRACES


@dataclass(frozen=True, slots=True)
class Side:
    """An insight's figures in one run."""

    count: int  # statements
    trace_count: int
    judged: int
    frequency: float


@dataclass(slots=True)
class InsightChange:
    insight: Insight
    change: str
    base: Side
    head: Side
    delta: float | None  # f_head - f_base
    delta_low: float | None
    delta_high: float | None
    nodes: list[InsightChange] = field(default_factory=list)  # node insights the system insight holds (no level)


@dataclass(slots=True)
class Comparison:
    base_run: DiagnosisRun
    head_run: DiagnosisRun
    base_judged: int
    head_judged: int
    thresholds: Thresholds
    changes: dict[str, list[InsightChange]] = field(default_factory=lambda: {c: [] for c in CHANGES})

    @property
    def counts(self) -> dict[str, int]:
        return {change: len(rows) for change, rows in self.changes.items()}


def _judged(run: DiagnosisRun, occurrences) -> int:
    for occurrence in occurrences:
        return occurrence.judged
    summary = run.insights_summary or {}
    return int(summary.get("judged", run.done_count) or 0)


def _ready(run: DiagnosisRun) -> DiagnosisRun:
    if run.status not in (DiagnosisRun.Status.SUCCEEDED, DiagnosisRun.Status.BUDGET_EXHAUSTED):
        raise InsightsNotReadyError(
            f"Run {run.pk} is {run.status}: only a succeeded (or budget-exhausted) run can be compared"
            + (" once it finishes; wait for it (`clearctl runs wait`)" if not run.is_finished else ""),
            extra={"run": str(run.pk), "status": run.status, "insights_status": run.insights_status})
    if run.insights_status != "done":
        state = run.insights_status or "not requested"
        raise InsightsNotReadyError(
            f"The insights of run {run.pk} are not built yet ({state}); retry in a few seconds"
            + (f": the build failed ({run.insights_error[:200]}); rebuild with `manage.py build_insights --force`"
               if run.insights_status == "failed" else ""),
            extra={"run": str(run.pk), "status": run.status, "insights_status": run.insights_status})
    return run


def _final(insight: Insight, insights: dict[int, Insight]) -> Insight:
    seen = set()
    while insight.merged_into_id and insight.merged_into_id not in seen:
        seen.add(insight.pk)
        target = insights.get(insight.merged_into_id) or Insight.objects.filter(pk=insight.merged_into_id).first()
        if target is None:
            break
        insights[target.pk] = target
        insight = target
    return insight


def _detached_sides(run: DiagnosisRun, groups: list[dict], insights: dict) -> tuple[int, dict]:
    """A run that wrote no insights (diagnosis/insights/detached.py): its groups matched to stored insights count as
    those; the others as unsaved insights keyed ("run", index), matched across the two runs by _pair_new."""
    judged = int((run.insights_summary or {}).get("judged", run.done_count) or 0)
    stored = Insight.objects.in_bulk([g["insight_id"] for g in groups if g.get("insight_id")])
    sides: dict = {}
    keys: dict[int, object] = {}
    for index, group in enumerate(groups):
        if group.get("is_other"):
            continue
        found = stored.get(group.get("insight_id"))
        keys[index] = _final(found, insights).pk if found is not None else (str(run.pk), index)
    for index, group in enumerate(groups):
        if group.get("is_other"):
            continue
        side = Side(group["count"], group["trace_count"], group["judged"] or judged, group["frequency"])
        if group.get("insight_id") in stored:
            insight = _final(stored[group["insight_id"]], insights)
            key = insight.pk
        else:
            key = (str(run.pk), index)
            insight = Insight(level=group["level"], node=group["node"], title=group["title"],
                              severity=group["severity"], fingerprint=group.get("fingerprint", ""))
            insight.detached_centroid = group.get("centroid")
            # the problems (system groups) of this run that hold this new node group: _nest puts it under them
            insight.detached_holders = [keys[i] for i in group.get("systems") or [] if i in keys]
        insights.setdefault(key, insight)
        known = sides.get(key)
        if known is None or side.trace_count > known.trace_count:
            sides[key] = side
    return judged, sides


def _pair_new(base: dict, head: dict, insights: dict) -> None:
    """Groups of the two runs that no stored insight matched are one insight when the identity rule (centroid
    cosine, else fingerprint) pairs them: the base's key is renamed to the head's."""
    from diagnosis.clustering import ClusterRef, InsightRef, match_clusters_to_insights
    from diagnosis.insights.identity import identity_threshold

    def refs(side: dict, kind):
        out = []
        for key in side:
            insight = insights[key]
            centroid = getattr(insight, "detached_centroid", None)
            if isinstance(key, tuple) and centroid:
                out.append(kind(repr(key), np.asarray(centroid, dtype=np.float32), insight.node, insight.level,
                                insight.fingerprint))
        return out

    heads, bases = refs(head, ClusterRef), refs(base, InsightRef)
    if not heads or not bases:
        return
    by_repr = {repr(k): k for k in (*base, *head) if isinstance(k, tuple)}
    renamed: dict = {}
    for head_ref, match in match_clusters_to_insights(heads, bases, threshold=identity_threshold()).items():
        if match.insight_id is not None:
            base_key, head_key = by_repr[match.insight_id], by_repr[head_ref]
            base[head_key] = base.pop(base_key)
            renamed[base_key] = head_key
    for insight in insights.values():  # holders named by the base's keys follow the rename
        if getattr(insight, "detached_holders", None):
            insight.detached_holders = [renamed.get(k, k) for k in insight.detached_holders]


def _sides(project: Project, run: DiagnosisRun, insights: dict) -> tuple[int, dict]:
    groups = (run.insights_summary or {}).get("groups")
    if (run.insights_summary or {}).get("detached") and groups is not None:
        return _detached_sides(run, groups, insights)
    occurrences = list(insight_occurrences_of_run(project=project, run=run))
    judged = _judged(run, occurrences)
    sides: dict[int, Side] = {}
    for occurrence in occurrences:
        insight = _final(occurrence.insight, insights)
        insights.setdefault(insight.pk, insight)
        known = sides.get(insight.pk)
        if known is None or occurrence.trace_count > known.trace_count:
            sides[insight.pk] = Side(occurrence.count, occurrence.trace_count, occurrence.judged or judged,
                                     occurrence.frequency)
    return judged, sides


def _classify(base: Side, head: Side, thresholds: Thresholds) -> tuple[str, float | None, tuple | None]:
    delta, interval = newcombe_difference(head.trace_count, head.judged, base.trace_count, base.judged,
                                          thresholds.confidence)
    if base.trace_count == 0:
        return ("new" if head.trace_count >= thresholds.min_traces else "unchanged"), delta, interval
    if head.trace_count == 0:
        return "resolved", delta, interval
    if delta is not None and interval is not None:
        if delta >= thresholds.min_delta and interval[0] > 0:
            return "worse", delta, interval
        if -delta >= thresholds.min_delta and interval[1] < 0:
            return "better", delta, interval
    return "unchanged", delta, interval


def insights_compare(*, project: Project, base_run: DiagnosisRun, head_run: DiagnosisRun,
                     thresholds: Thresholds = Thresholds(), level: str | None = None) -> Comparison:
    """The insights of `head_run` against those of `base_run` (both of `project`, finished, insights built)."""
    if base_run.project_id != project.pk or head_run.project_id != project.pk:
        raise NotFoundError("No such diagnosis run in this project")
    if not 0 <= thresholds.min_delta <= 1:
        raise CompareInvalidError(f"min_delta must be in [0, 1]; got {thresholds.min_delta}")
    if not 0 < thresholds.confidence < 1:
        raise CompareInvalidError(f"confidence must be in (0, 1); got {thresholds.confidence}")
    if thresholds.min_traces < 1:
        raise CompareInvalidError(f"min_traces must be at least 1; got {thresholds.min_traces}")
    _ready(base_run), _ready(head_run)
    insights: dict[int, Insight] = {}
    base_judged, base = _sides(project, base_run, insights)
    head_judged, head = _sides(project, head_run, insights)
    _pair_new(base, head, insights)
    comparison = Comparison(base_run=base_run, head_run=head_run, base_judged=base_judged, head_judged=head_judged,
                            thresholds=thresholds)
    unlisted = _unlisted_outliers(project, [key for key in (*base, *head) if isinstance(key, int)])
    for insight_id in sorted(set(base) | set(head), key=str):
        insight = insights[insight_id]
        if insight.is_other or insight.review == Insight.Review.REJECTED or insight.status == Insight.Status.IGNORED:
            continue
        if insight_id in unlisted:
            continue
        if level and insight.level != level:
            continue
        b = base.get(insight_id) or Side(0, 0, base_judged, 0.0)
        h = head.get(insight_id) or Side(0, 0, head_judged, 0.0)
        change, delta, interval = _classify(b, h, thresholds)
        insight.compare_key = insight_id
        comparison.changes[change].append(InsightChange(
            insight=insight, change=change, base=b, head=h, delta=delta,
            delta_low=interval[0] if interval else None, delta_high=interval[1] if interval else None))
    if not level:
        _nest(project, comparison)
    for rows in comparison.changes.values():
        rows.sort(key=lambda c: (_SEVERITY_RANK.get(c.insight.severity, 9), -max(c.head.frequency, c.base.frequency),
                                 str(c.insight.pk or c.insight.title)))
    return comparison


def _unlisted_outliers(project: Project, pks: list[int]) -> set[int]:
    """Outlier findings alone not associated with failure: no problem, as the lists hide them."""
    from diagnosis.selectors.problems import outlier_alone_unassociated

    return set(Insight.objects.filter(project=project, pk__in=pks).filter(outlier_alone_unassociated())
               .values_list("pk", flat=True))


def _nest(project: Project, comparison: Comparison) -> None:
    """One row per problem, so a gate counts each bug once: a node insight held by a system insight of the
    comparison goes under it (`nodes`, under each one that holds it) and is counted with it, not on its own."""
    from diagnosis.selectors import insight_link_pairs

    rows = [row for change_rows in comparison.changes.values() for row in change_rows]
    systems = {row.insight.compare_key: row for row in rows if row.insight.level == Insight.Level.SYSTEM}
    holders: dict[object, list[InsightChange]] = {}
    for system_pk, node_pk in insight_link_pairs(project=project,
                                                 system_pks=[k for k in systems if isinstance(k, int)]):
        holders.setdefault(node_pk, []).append(systems[system_pk])
    for row in rows:  # a node pattern of a run that writes no insights, held by a problem of that run
        held = [systems[k] for k in getattr(row.insight, "detached_holders", None) or [] if k in systems]
        if row.insight.level == Insight.Level.NODE and held:
            holders.setdefault(row.insight.compare_key, []).extend(held)
    for change, change_rows in comparison.changes.items():
        kept = []
        for row in change_rows:
            held_by = holders.get(row.insight.compare_key) if row.insight.level == Insight.Level.NODE else None
            if held_by:
                for system in held_by:
                    system.nodes.append(row)
            else:
                kept.append(row)
        comparison.changes[change] = kept


def compare_run_resolve(*, project: Project, run_id=None, release: str | None = None, side: str) -> DiagnosisRun:
    """The run one side of a comparison names: a run id, or a release (its latest succeeded run)."""
    if (run_id is None) == (release is None):
        raise CompareInvalidError(f"Give either {side}_run (a run id) or {side}_release (a release), not both or "
                                  "neither", extra={"fields": {f"{side}_run": ["one of the two"],
                                                               f"{side}_release": ["one of the two"]}})
    if run_id is not None:
        return diagnosis_run_get(project=project, run_id=run_id)
    run = diagnosis_run_latest_finished(project=project, release=release)
    if run is None:
        raise ReleaseNotDiagnosedError(
            f"No succeeded diagnosis run over release {release!r}; start one with POST /api/v1/runs/ "
            f'{{"release": "{release}"}} (or `clearctl runs start --release {release} --wait`)',
            extra={"release": release})
    return run
