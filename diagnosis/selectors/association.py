"""How an insight's pattern splits between failing and succeeding traces: the facts behind its lift and its
failure association, for the REST API (which shows what the insight page shows), and in how many of its traces the
run recovered from the error (judges/recovery.py): "recovered in N of M runs", with the traces the lift compares
(clustering/stats.py `lift_traces`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from django.db.models import Q

from clear.projects.models import Project
from diagnosis.clustering.stats import TraceInfo, lift_traces
from diagnosis.models import Insight, InsightOccurrence, InsightStatement, RunTrace
from traces.selectors import trace_outcomes_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutcomeShares:
    """In the run the insight's figures come from (its last run): the judged traces with a recorded failure or
    success outcome, and how many of each show the pattern. Traces without an outcome count in neither."""

    run_id: UUID | None
    failing_traces: int
    failing_with_pattern: int
    succeeding_traces: int
    succeeding_with_pattern: int
    pattern_traces: int = 0  # the insight's traces in that run
    recovered_traces: int = 0  # of those, the ones whose occurrences were all recovered errors
    recovered_failing: int = 0  # of the recovered ones, the traces that failed
    recovered_succeeding: int = 0
    lift_on: str = "all"  # the traces the lift compares: "all", "unrecovered" or "recovered"

    @property
    def failing_share(self) -> float | None:
        return self.failing_with_pattern / self.failing_traces if self.failing_traces else None

    @property
    def succeeding_share(self) -> float | None:
        return self.succeeding_with_pattern / self.succeeding_traces if self.succeeding_traces else None


# Under the dashboards prefix (frontend/dashboard_cache.py KEY_PREFIX), so whatever empties those empties these.
OUTCOME_CACHE_PREFIX = "clear:dashboard:v2:run-outcomes:"


def _run_outcome_sets_compute(*, project: Project, runs: set) -> dict[UUID, dict[str, set[str]]]:
    sets: dict[UUID, dict[str, set[str]]] = {run_id: {"failure": set(), "success": set()} for run_id in runs}
    judged = list(RunTrace.objects.filter(run__project=project, run_id__in=runs, status=RunTrace.Status.DONE)
                  .values_list("run_id", "trace_id"))
    recorded = trace_outcomes_for(project=project, trace_pks=[pk for _, pk in judged])
    for run_id, pk in judged:
        if pk in recorded:
            trace_id, outcome = recorded[pk]
            sets[run_id][outcome].add(trace_id)
    return sets


def _run_outcome_sets(*, project: Project, runs: set) -> dict[UUID, dict[str, set[str]]]:
    """Per run, the ids of its judged traces that failed and that succeeded, as sets: each insight then costs two set
    intersections with its pattern. Cached like the dashboards (frontend/dashboard_cache.py): keyed by the run's
    progress, so judging moves it at once, and kept CLEAR_DASHBOARD_CACHE_SECONDS, so an outcome set later through
    the API shows within that time; at 10,000 judged traces a run it costs 50-70 ms, on every insight page and
    insights API page. With the cache unreachable the figures are computed, not broken."""
    from django.conf import settings
    from django.core.cache import caches

    from diagnosis.models import DiagnosisRun

    if not settings.CLEAR_DASHBOARD_CACHE or not runs:
        return _run_outcome_sets_compute(project=project, runs=runs)
    progress = DiagnosisRun.objects.filter(project=project, pk__in=runs).values_list("pk", "done_count")
    keys = {run_id: f"{OUTCOME_CACHE_PREFIX}{run_id}:{done}" for run_id, done in progress}
    cache = caches["dashboards"]
    try:
        cached = cache.get_many(list(keys.values()))
    except Exception as exc:  # noqa: BLE001 - any cache failure (connection refused, timeout, bad pickle)
        logger.warning("dashboard cache unavailable (%s): computing run outcomes without it", exc)
        cached = {}
    found = {run_id: cached[key] for run_id, key in keys.items() if key in cached}
    missing = runs - found.keys()
    if not missing:
        return found
    computed = _run_outcome_sets_compute(project=project, runs=missing)
    try:
        cache.set_many({keys[run_id]: value for run_id, value in computed.items() if run_id in keys},
                       timeout=settings.CLEAR_DASHBOARD_CACHE_SECONDS)
    except Exception as exc:  # noqa: BLE001
        logger.warning("dashboard cache unavailable (%s): run outcomes not stored", exc)
    return {**found, **computed}


def _recovered_traces(*, project: Project, last_run: dict[int, object]) -> dict[int, set[str]]:
    """{insight pk: trace ids of its last run whose statements of the insight are all of recovered errors}: the
    traces with a recovered statement, less those where another statement of the insight was not recovered. Two
    queries, the second over those traces only (few: most insights hold no recovered error)."""
    pks, runs = list(last_run), {run for run in last_run.values() if run}
    of_insights = Q(node_insight_id__in=pks) | Q(system_insight_id__in=pks)
    rows = list(InsightStatement.objects.filter(of_insights, project=project, run_id__in=runs,
                                                feedback__details__recovered=True)
                .values_list("run_id", "node_insight_id", "system_insight_id", "trace_id", "trace__trace_id",
                             "feedback_id"))
    if not rows:
        return {}
    found: dict[int, dict[int, str]] = {}
    for run_id, node_pk, system_pk, trace_pk, trace_id, _ in rows:
        for pk in (node_pk, system_pk):
            if pk in last_run and last_run[pk] == run_id:
                found.setdefault(pk, {})[trace_pk] = trace_id
    others = InsightStatement.objects.filter(of_insights, project=project, run_id__in=runs,
                                             trace_id__in={t for traces in found.values() for t in traces}) \
        .exclude(feedback_id__in={row[5] for row in rows}) \
        .values_list("run_id", "node_insight_id", "system_insight_id", "trace_id")
    for run_id, node_pk, system_pk, trace_pk in others:
        for pk in (node_pk, system_pk):
            if pk in found and last_run[pk] == run_id:
                found[pk].pop(trace_pk, None)
    return {pk: set(traces.values()) for pk, traces in found.items() if traces}


def insight_outcome_shares_map(*, project: Project, insights: list[Insight]) -> dict[int, OutcomeShares]:
    """{insight pk: OutcomeShares} in a few queries, whatever the number of insights."""
    runs = {insight.last_run_id for insight in insights if insight.last_run_id}
    patterns: dict[int, set[str]] = {}
    occurrences = InsightOccurrence.objects.filter(
        insight__project=project, insight__in=[insight.pk for insight in insights], run_id__in=runs,
    ).values_list("insight_id", "run_id", "trace_ids")
    last_run = {insight.pk: insight.last_run_id for insight in insights}
    for insight_id, run_id, trace_ids in occurrences:
        if last_run.get(insight_id) == run_id:
            patterns[insight_id] = set(trace_ids or [])
    # The lift counts recorded outcomes only: a judge's failing verdict is what the insight is made of.
    by_outcome = _run_outcome_sets(project=project, runs=runs)
    recovered_of = _recovered_traces(project=project, last_run={i.pk: i.last_run_id for i in insights})
    shares = {}
    empty: dict[str, set[str]] = {"failure": set(), "success": set()}
    for insight in insights:
        run = by_outcome.get(insight.last_run_id, empty)
        pattern = patterns.get(insight.pk, set())
        failing, succeeding = run["failure"], run["success"]
        recovered = recovered_of.get(insight.pk, set()) & pattern
        lift_on = "all"
        if recovered:
            # As the build computed the lift (insights/persist.py): only the traces with an outcome take part.
            known = {t: TraceInfo(failed=True) for t in failing} | {t: TraceInfo(failed=False) for t in succeeding}
            lift_on = lift_traces(pattern, recovered, known)[1]
        shares[insight.pk] = OutcomeShares(
            run_id=insight.last_run_id, failing_traces=len(failing),
            failing_with_pattern=len(failing & pattern),
            succeeding_traces=len(succeeding),
            succeeding_with_pattern=len(succeeding & pattern),
            pattern_traces=len(pattern), recovered_traces=len(recovered),
            recovered_failing=len(recovered & failing), recovered_succeeding=len(recovered & succeeding),
            lift_on=lift_on)
    return shares
