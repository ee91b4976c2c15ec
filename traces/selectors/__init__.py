"""Reads of traces and spans, always scoped to a project: `traces` (a trace, the one trace filter, releases, nodes,
figures), `volume` (traces per bucket of trace time) and `graph` (per-node span figures and the workflow's transitions over the newest traces)."""

from traces.selectors.graph import (
    GRAPH_TRACE_SAMPLE,
    Edge,
    span_node_figures,
    span_node_status_list,
    span_workflow,
    trace_sample_pks,
)
from traces.selectors.traces import (
    NO_RELEASE,
    ProjectTraceStats,
    ReleaseStats,
    TraceFilter,
    release_filter_value,
    release_first_received,
    span_list_for_trace,
    span_node_list,
    trace_days_for,
    trace_expired_get,
    trace_expired_message,
    trace_get,
    trace_list,
    trace_list_filtered,
    trace_outcomes_for,
    trace_release_list,
    trace_release_newest,
    trace_stats,
)
from traces.selectors.volume import VolumeBucket, VolumeSeries, trace_volume_series

__all__ = [
    "GRAPH_TRACE_SAMPLE", "NO_RELEASE", "Edge", "ProjectTraceStats", "ReleaseStats", "TraceFilter", "VolumeBucket",
    "VolumeSeries", "release_filter_value", "release_first_received", "span_list_for_trace", "span_node_figures",
    "span_node_list", "span_node_status_list", "span_workflow", "trace_days_for", "trace_expired_get",
    "trace_expired_message", "trace_get", "trace_list", "trace_list_filtered", "trace_outcomes_for",
    "trace_release_list", "trace_release_newest", "trace_sample_pks", "trace_stats", "trace_volume_series",
]
