"""Insights another absorbed retire (issue 27, item 3).

A full run can fold the traces of a small insight into a named one: "Other feedback at weather_worker" with one trace
whose statement now clusters with a named insight at that node. Nothing matches the small insight any more, so it
used to stay listed with its old figures. It is absorbed when every statement it holds has a counterpart in this
run (same trace, judge and node: the judge said the same thing of the same trace again) held by one other insight of
its level and node; it is then merged into that one as a person's merge would leave it (merged_into, a "merged"
event on both) with the reason "absorbed", and leaves the open list. Its statements and occurrences stay where they
are: they are the history of what earlier runs saw, and compare resolves a merged insight to its target.
"""

from __future__ import annotations

from collections import defaultdict

from diagnosis.models import DiagnosisRun, Insight, InsightEvent, InsightStatement

ABSORBED = "absorbed"


def _holders(run: DiagnosisRun, field: str) -> dict[tuple, set[int]]:
    """(trace, judge, node) -> the insights of `field`'s level that hold this run's statements of it."""
    held: dict[tuple, set[int]] = defaultdict(set)
    rows = InsightStatement.objects.filter(run=run, excluded=False, **{f"{field}__isnull": False}) \
        .values_list("trace_id", "judge", "node", f"{field}_id")
    for trace, judge, node, insight_id in rows:
        held[(trace, judge, node)].add(insight_id)
    return held


def insights_absorbed_retire(*, run: DiagnosisRun) -> list[int]:
    """Merge into their absorber the open insights of the run's project that this run left without a statement
    and whose every statement's (trace, judge, node) this run gave to one other insight. The caller holds the
    project's lock; returns the retired insights' ids."""
    targets = {i.pk: i for i in Insight.objects.filter(project_id=run.project_id, merged_into__isnull=True,
                                                       is_other=False)}
    retired: list[int] = []
    for level, field in ((Insight.Level.NODE, "node_insight"), (Insight.Level.SYSTEM, "system_insight")):
        held = _holders(run, field)
        current = {i for ids in held.values() for i in ids}
        candidates = Insight.objects.filter(
            project_id=run.project_id, level=level, status=Insight.Status.OPEN, merged_into__isnull=True,
            split_from__isnull=True, split_into__isnull=True).exclude(pk__in=current)
        for candidate in candidates:
            keys = set(InsightStatement.objects.filter(excluded=False, **{field: candidate})
                       .values_list("trace_id", "judge", "node"))
            if not keys:
                continue
            common = set.intersection(*(held.get(key, set()) for key in keys))
            absorbers = [targets[i] for i in common if i in targets and i != candidate.pk
                         and (targets[i].level, targets[i].node) == (candidate.level, candidate.node)]
            if not absorbers:
                continue
            target = max(absorbers, key=lambda i: (i.trace_count, i.count, -i.pk))
            candidate.merged_into = target
            candidate.save(update_fields=["merged_into", "updated_at"])
            data = {"reason": ABSORBED, "run": str(run.pk), "traces": len({k[0] for k in keys})}
            InsightEvent.objects.create(insight=candidate, kind="merged", run=run, data={"into": target.pk, **data})
            InsightEvent.objects.create(insight=target, kind="merged", run=run, data={"from": candidate.pk, **data})
            retired.append(candidate.pk)
    return retired
