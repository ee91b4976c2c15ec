"""How an insight's pattern splits between failing and succeeding traces: the facts behind its lift and its
failure association, for the REST API (which shows what the insight page shows)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from uuid import UUID

from clear.projects.models import Project
from diagnosis.models import Insight, InsightOccurrence, RunTrace


@dataclass(frozen=True)
class OutcomeShares:
    """In the run the insight's figures come from (its last run): the judged traces with a recorded failure or
    success outcome, and how many of each show the pattern. Traces without an outcome count in neither."""

    run_id: UUID | None
    failing_traces: int
    failing_with_pattern: int
    succeeding_traces: int
    succeeding_with_pattern: int

    @property
    def failing_share(self) -> float | None:
        return self.failing_with_pattern / self.failing_traces if self.failing_traces else None

    @property
    def succeeding_share(self) -> float | None:
        return self.succeeding_with_pattern / self.succeeding_traces if self.succeeding_traces else None


def insight_outcome_shares_map(*, project: Project, insights: list[Insight]) -> dict[int, OutcomeShares]:
    """{insight pk: OutcomeShares} in two queries, whatever the number of insights."""
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
    outcomes: dict[UUID, dict[str, str]] = defaultdict(dict)
    rows = RunTrace.objects.filter(run__project=project, run_id__in=runs, status=RunTrace.Status.DONE,
                                   trace__outcome__in=["failure", "success"])
    for run_id, trace_id, outcome in rows.values_list("run_id", "trace__trace_id", "trace__outcome"):
        outcomes[run_id][trace_id] = outcome
    shares = {}
    for insight in insights:
        judged = outcomes.get(insight.last_run_id, {})
        pattern = patterns.get(insight.pk, set())
        failing = [trace_id for trace_id, outcome in judged.items() if outcome == "failure"]
        succeeding = [trace_id for trace_id, outcome in judged.items() if outcome == "success"]
        shares[insight.pk] = OutcomeShares(
            run_id=insight.last_run_id, failing_traces=len(failing),
            failing_with_pattern=sum(trace_id in pattern for trace_id in failing),
            succeeding_traces=len(succeeding),
            succeeding_with_pattern=sum(trace_id in pattern for trace_id in succeeding))
    return shares
