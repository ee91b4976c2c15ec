"""The node × insight heat map: for one diagnosis run, how many of each node's judged traces show each insight.

A cell is (traces of the run with a statement of the insight made at the node) / (traces the run judged that have
a span of the node). Statements of verdicts marked wrong are left out, as insight clustering leaves them out.
Three grouped queries whatever the number of nodes and insights; the columns are capped (the most frequent ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.cache import cache
from django.db.models import Count, Q

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence, InsightStatement, RunTrace
from diagnosis.selectors.insights import insight_list
from traces.models import Span
from traces.selectors import trace_days_for

MAX_COLUMNS = 16
JUDGED_CACHE_SECONDS = 600


@dataclass
class HeatMapCell:
    insight: Insight
    traces: int
    judged: int

    @property
    def share(self) -> float | None:
        return self.traces / self.judged if self.judged else None


@dataclass
class HeatMapRow:
    node: str
    judged: int
    cells: list[HeatMapCell] = field(default_factory=list)


@dataclass
class HeatMap:
    run: DiagnosisRun
    level: str
    columns: list[Insight]
    rows: list[HeatMapRow]
    more_columns: bool  # the column cap left some of the run's insights out


def node_judged_trace_counts(*, project: Project, run: DiagnosisRun) -> dict[str, int]:
    """{node: traces the run judged with a span at the node}. It reads every span of the judged traces (10k
    traces: 200k spans, ~1 s), so a finished run's figures are kept in the cache for JUDGED_CACHE_SECONDS: the
    run's traces no longer change then; only spans arriving late for a judged trace, or deleted by retention, can
    make the cached counts differ, and for at most that long."""
    key = f"clear:heatmap-judged:{run.pk}:{run.done_count}:{run.finished_at.isoformat() if run.finished_at else ''}"
    judged = cache.get(key) if run.is_finished else None
    if judged is None:
        traces = RunTrace.objects.filter(run=run, status=RunTrace.Status.DONE).values("trace_id")
        days = trace_days_for(project=project, trace_pks=traces)  # only their days' span partitions
        judged = dict(Span.objects.filter(project=project, trace_id__in=traces, trace_day__in=days).exclude(node="")
                      .values("node").annotate(n=Count("trace_id", distinct=True)).order_by()
                      .values_list("node", "n"))
        if run.is_finished:
            cache.set(key, judged, JUDGED_CACHE_SECONDS)
    return judged


def node_insight_heatmap_get(*, project: Project, run: DiagnosisRun, level: str = Insight.Level.SYSTEM) -> HeatMap:
    """The run's heat map at `level`: its MAX_COLUMNS most frequent insights, the rows with the largest share first
    (the rows worth reading come first)."""
    statement_field = "system_insight" if level == Insight.Level.SYSTEM else "node_insight"
    insights = (insight_list(project=project, run=run, level=level, include_other=False)
                .order_by("-frequency", "-count", "pk"))
    columns = list(insights[: MAX_COLUMNS + 1])
    more = len(columns) > MAX_COLUMNS
    columns = columns[:MAX_COLUMNS]
    judged = node_judged_trace_counts(project=project, run=run)
    counts: dict[tuple[str, int], int] = {}
    if columns:
        rows = (InsightStatement.objects.filter(project=project, run=run, excluded=False)
                .filter(Q(**{f"{statement_field}__in": columns})).exclude(node="")
                .values("node", statement_field).annotate(n=Count("trace_id", distinct=True)).order_by())
        counts = {(r["node"], r[statement_field]): r["n"] for r in rows}
    nodes = sorted(set(judged) | {node for node, _ in counts})
    result = []
    for node in nodes:
        row = HeatMapRow(node=node, judged=judged.get(node, 0))
        row.cells = [HeatMapCell(insight=i, traces=counts.get((node, i.pk), 0), judged=row.judged) for i in columns]
        result.append(row)
    result.sort(key=lambda r: (-max((c.share or 0 for c in r.cells), default=0), r.node))
    return HeatMap(run=run, level=level, columns=columns, rows=result, more_columns=more)


def heatmap_runs_with_node_insights(*, project: Project, runs: list[DiagnosisRun]) -> set:
    """The pks of those runs in which a node-level insight occurred (one query): the heat map defaults to the
    newest of them, as a run with system-level insights only would show a single column."""
    occurrences = (InsightOccurrence.objects.filter(run_id__in=[run.pk for run in runs], insight__project=project,
                                                    insight__level=Insight.Level.NODE, insight__is_other=False,
                                                    insight__merged_into__isnull=True)
                   .exclude(insight__review=Insight.Review.REJECTED))
    return set(occurrences.values_list("run_id", flat=True).distinct())
