"""Trend by release: for each release, the latest run with insights that judged traces of that release says how
many of them had the insight (InsightOccurrence.releases) out of how many were judged (the run's
insights_summary["judged_by_release"]). A release judged again later is described by the later run only, so
re-running a release never double-counts it, and a fixed insight shows 0 for the releases judged after the fix.
Only runs that write the project's insights count: a CI gate's, sampled or filtered run keeps its figures on itself.
A run still judging a release (a continuous run that took its traces) does not replace a run that judged all of it;
shown before any complete run, its row is marked partial with how many of the release's traces it has judged.

The trend is written under the project's lock, the one every insights build holds while it writes (services/insights.py),
and by the build itself before it commits: a trend refresh that read the runs before another build committed would
otherwise write its older view over that build's (a release losing its row), and a page read between a build's commit
and its trend would show a new insight with none (issue 44)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Count, Q

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence, RunTrace
from traces.models import Trace


def _latest_by_release(*, project_id: int, current_run_id=None, current_judged: dict | None = None
                       ) -> tuple[list[str], dict[str, object], dict[str, int], dict[str, int]]:
    """Per release: the latest run with insights that judged it completely, else the latest that judged part of it
    (its traces of that release not all judged yet: open says how many are still to judge). current_judged: the
    current run's judged traces by release when its summary is not written yet (a build, before its commit)."""
    # A run that keeps its clusters on itself (a CI gate's, sampled, filtered: insights/detached.py) gave no insight
    # figures, so it cannot describe a release: taken as the newest run of v1, a gate's made every trend read 0 there.
    runs = list(DiagnosisRun.objects.filter(Q(insights_status="done") | Q(pk=current_run_id), project_id=project_id)
                .filter(DiagnosisRun.writes_insights_q()).order_by("created_at", "pk")
                .values_list("pk", "insights_summary", "continuous"))
    waiting: dict[tuple, int] = {}
    for run_pk, release, n in (RunTrace.objects.filter(run_id__in=[pk for pk, _, _ in runs],
                                                       status__in=RunTrace.OPEN)
                               .values("run_id", "trace__release").annotate(n=Count("pk"))
                               .values_list("run_id", "trace__release", "n")):
        waiting[(run_pk, release or "")] = n
    # A continuous run claims a release's traces batch by batch and has no RunTrace for those it has not claimed
    # yet: with none open it may still have judged only part of the release, so it is complete only once it has
    # judged as many traces as the release has.
    traces_of = dict(Trace.objects.filter(project_id=project_id).values("release").annotate(n=Count("pk"))
                     .values_list("release", "n")) if any(continuous for _, _, continuous in runs) else {}
    order: list[str] = []
    latest: dict[str, object] = {}
    judged: dict[str, int] = {}
    open_: dict[str, int] = {}
    for run_pk, summary, continuous in runs:
        by_release = current_judged if current_judged is not None and run_pk == current_run_id \
            else (summary or {}).get("judged_by_release")
        for release, n in (by_release or {}).items():
            if release not in latest:
                order.append(release)
            partial = waiting.get((run_pk, release), 0)
            if continuous:
                partial = max(partial, traces_of.get(release, 0) - int(n))
            if partial and release in latest and not open_.get(release):
                continue  # a complete run of the release stands until a later one is complete too
            latest[release], judged[release], open_[release] = run_pk, int(n), partial
    return order, latest, judged, open_


def _trend(insight_id: int, order, latest, judged, counts, open_) -> list[dict]:
    out = []
    for release in order:
        run_pk = latest[release]
        count = int((counts.get((insight_id, run_pk)) or {}).get(release, 0))
        n = judged[release]
        row = {"release": release, "count": count, "judged": n, "frequency": round(count / n, 6) if n else 0.0,
               "run": str(run_pk)}
        if open_.get(release):
            row["partial"] = True
            row["of"] = n + open_[release]  # "4 of 22 judged"
        out.append(row)
    return out


def trend_refresh(*, project_id: int, current_run_id=None, current_judged: dict | None = None) -> int:
    """Recompute Insight.trend for every live insight of the project; returns how many were written. In a build's
    transaction (which holds the project's lock) current_judged is its run's judged_by_release, not written yet."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project_id).first()  # the runs read are the runs written
        order, latest, judged, open_ = _latest_by_release(project_id=project_id, current_run_id=current_run_id,
                                                          current_judged=current_judged)
        counts = {(i, r): rel for i, r, rel in InsightOccurrence.objects.filter(
            insight__project_id=project_id, run_id__in=set(latest.values())).values_list("insight_id", "run_id",
                                                                                           "releases")}
        insights = list(Insight.objects.filter(project_id=project_id, merged_into__isnull=True).only("pk", "trend"))
        for insight in insights:
            insight.trend = _trend(insight.pk, order, latest, judged, counts, open_)
        Insight.objects.bulk_update(insights, ["trend"], batch_size=500)
    return len(insights)


def trend_by_run(*, insight: Insight) -> list[dict]:
    """The insight's figures in every run it occurred in, oldest first."""
    rows = InsightOccurrence.objects.filter(insight=insight).select_related("run").order_by("run__created_at")
    return [{"run": str(o.run_id), "run_name": o.run.name, "release": o.run.release, "created_at": o.run.created_at,
             "count": o.count, "traces": o.trace_count, "judged": o.judged, "frequency": o.frequency,
             "lift": o.lift} for o in rows]
