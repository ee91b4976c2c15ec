"""Reads of the diagnosis app, always scoped to a project: `runs`, `rubrics`, `feedback` (verdicts, and traces and
runs with their failing verdicts), `insights`, `nodes` (per-node figures with verdicts, the workflow graph) and
`heatmap` (node × insight shares of a run)."""

from diagnosis.selectors.feedback import (
    diagnosis_run_list_with_failing,
    feedback_correction_map,
    feedback_failing_list,
    feedback_failing_list_for_run,
    feedback_failing_spans,
    feedback_failing_trace_count,
    feedback_get,
    feedback_list,
    feedback_list_for_trace,
    feedback_runs_for_trace,
    trace_list_with_failing,
)
from diagnosis.selectors.heatmap import (
    HeatMap,
    HeatMapCell,
    HeatMapRow,
    node_insight_heatmap_get,
    node_judged_trace_counts,
)
from diagnosis.selectors.insights import (
    InsightTrend,
    insight_count_by_node,
    insight_evidence_list,
    insight_get,
    insight_link_pairs,
    insight_links,
    insight_list,
    insight_list_ranked,
    insight_list_top,
    insight_occurrences_of_run,
    insight_statement_list,
    insight_evidence_of_figures_run,
    insight_release_figures,
    insight_trend,
    not_associated_with_failure,
)
from diagnosis.selectors.nodes import (
    NodeStats,
    node_stats_list,
    node_workflow_get,
)
from diagnosis.selectors.rubrics import (
    rubric_get,
    rubric_judge_names,
    rubric_list,
)
from diagnosis.selectors.runs import (
    JudgeSpend,
    RunSummary,
    diagnosis_run_get,
    diagnosis_run_latest,
    insights_last_refreshed,
    diagnosis_run_latest_finished,
    diagnosis_run_list,
    diagnosis_run_list_with_insights,
    diagnosis_run_reusable,
    diagnosis_run_failing_traces,
    diagnosis_run_spend,
    diagnosis_run_summary,
)

__all__ = [
    "HeatMap", "HeatMapCell", "HeatMapRow", "InsightTrend", "JudgeSpend", "NodeStats", "RunSummary",
    "diagnosis_run_get", "diagnosis_run_latest", "diagnosis_run_latest_finished", "diagnosis_run_list",
    "diagnosis_run_list_with_failing", "diagnosis_run_list_with_insights", "diagnosis_run_reusable",
    "diagnosis_run_failing_traces", "diagnosis_run_spend", "diagnosis_run_summary", "feedback_correction_map", "feedback_failing_list",
    "feedback_failing_list_for_run", "feedback_failing_spans", "feedback_failing_trace_count",
    "feedback_get", "feedback_list",
    "feedback_list_for_trace", "feedback_runs_for_trace", "insight_count_by_node", "insight_evidence_list",
    "insight_get", "insight_link_pairs", "insight_links", "insight_list", "insight_list_ranked", "insight_list_top",
    "insight_occurrences_of_run", "insight_statement_list", "insight_evidence_of_figures_run", "insight_release_figures", "insight_trend", "node_insight_heatmap_get",
    "node_judged_trace_counts", "node_stats_list", "node_workflow_get", "not_associated_with_failure", "rubric_get",
    "rubric_judge_names", "rubric_list", "trace_list_with_failing",
    "insights_last_refreshed",
]
