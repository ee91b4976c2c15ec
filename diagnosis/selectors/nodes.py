"""Per-node figures with the judges' verdicts: spans, traces, errors, spans a verdict fails and the pass rate, for
the nodes page and the workflow graph (over the traces `traces.selectors.trace_sample_pks` picks)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from clear.projects.models import Project
from diagnosis.selectors.feedback import feedback_failing_spans
from traces.selectors import Edge, span_node_figures, span_node_status_list, span_workflow


@dataclass
class NodeStats:
    node: str
    spans: int
    traces: int
    errors: int
    failing: int  # spans with a failing verdict from any run
    bad: int  # spans with an error or a failing verdict
    agent_spans: int = 0

    @property
    def pass_rate(self) -> float | None:
        return (self.spans - self.bad) / self.spans if self.spans else None


def _stats(rows: dict[str, dict], failing_by_node: dict[str, tuple[int, int]]) -> list[NodeStats]:
    stats = []
    for node in sorted(rows):
        row = rows[node]
        n, n_error = failing_by_node.get(node, (0, 0))
        stats.append(NodeStats(node=node, spans=row["spans"], traces=row["traces"], errors=row["errors"],
                               agent_spans=row["agent_spans"], failing=n, bad=row["errors"] + n - n_error))
    return stats


def _failing_by_node(*, project: Project, trace_pks: list[int]) -> dict[str, tuple[int, int]]:
    """{node: (spans with a failing verdict, of which error spans)}."""
    by_node: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    pairs = feedback_failing_spans(project=project, trace_pks=trace_pks)
    for node, status in span_node_status_list(project=project, pairs=pairs):
        by_node[node][0] += 1
        by_node[node][1] += status == "error"
    return {node: (n, n_error) for node, (n, n_error) in by_node.items()}


def node_stats_list(*, project: Project, trace_pks: list[int]) -> list[NodeStats]:
    """Per node of these traces: spans, traces, error spans, spans with a failing verdict, and the pass rate (share
    of spans with neither). Three queries: one grouped over the spans, the failing verdicts, their spans."""
    return _stats(span_node_figures(project=project, trace_pks=trace_pks),
                  _failing_by_node(project=project, trace_pks=trace_pks))


def node_workflow_get(*, project: Project, trace_pks: list[int]) -> tuple[list[NodeStats], list[Edge]]:
    """Node figures and transitions (calls and hand-offs, see traces.selectors.span_workflow) of these traces.
    Three queries (spans, failing verdicts, their spans)."""
    rows, edges = span_workflow(project=project, trace_pks=trace_pks)
    return _stats(rows, _failing_by_node(project=project, trace_pks=trace_pks)), edges
