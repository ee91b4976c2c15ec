"""Acceptance: the support-desk suite exports to a live Clear over OTLP/HTTP, and every task's trace is stored with
its agents as nodes and the suite's grade as the outcome."""

from collections import defaultdict

import pytest
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from examples.support_desk import TASKS, execute_suite
from examples.support_desk.telemetry import otlp_http_exporter
from traces.models import Trace
from traces.services import trace_finalize


class TeeExporter(SpanExporter):
    """Sends every batch to Clear and keeps a copy, so the test knows which agents ran in which trace."""

    def __init__(self, remote: SpanExporter) -> None:
        self.remote = remote
        self.copy = InMemorySpanExporter()

    def export(self, spans):
        self.copy.export(spans)
        return self.remote.export(spans)

    def shutdown(self) -> None:
        self.remote.shutdown()
        self.copy.shutdown()


@pytest.mark.django_db(transaction=True)
def test_the_suite_lands_in_a_live_clear_with_nodes_and_outcomes(live_server, issued_key, project):
    exporter = TeeExporter(otlp_http_exporter(live_server.url, issued_key.secret))
    try:
        report = execute_suite(release="r1", bugs="all", seed=0, exporter=exporter)
    finally:
        exporter.shutdown()
    assert report.failed_spans == 0, "the OTLP export to the live server failed"
    assert report.exported_spans > 0
    results = report.results
    assert len(results) == len(TASKS)
    assert {r.outcome for r in results} == {"success", "failure"}  # the planted faults fail some tasks

    agents_by_trace: dict[str, set[str]] = defaultdict(set)
    spans_by_trace: dict[str, int] = defaultdict(int)
    for span in exporter.copy.get_finished_spans():
        trace_id = f"{span.context.trace_id:032x}"
        spans_by_trace[trace_id] += 1
        if span.attributes.get("gen_ai.operation.name") == "invoke_agent":
            agents_by_trace[trace_id].add(span.attributes["gen_ai.agent.name"])

    traces = {t.trace_id: t for t in Trace.objects.filter(project=project)}
    assert set(traces) == {r.trace_id for r in results}  # one trace per task, nothing else
    for trace in traces.values():
        trace_finalize(trace_pk=trace.pk)

    for result in results:
        trace = Trace.objects.get(pk=traces[result.trace_id].pk)
        agents = agents_by_trace[result.trace_id]
        workers = {a for a in agents if a.endswith("_worker")}
        assert workers, result.task_id
        assert agents == {"support_desk", "planner", "mediator", "writer"} | workers, result.task_id
        nodes = set(trace.spans.values_list("node", flat=True))
        assert nodes == agents, result.task_id  # every span (chat, tool) lands on its agent
        assert trace.span_count == spans_by_trace[result.trace_id]
        assert (trace.outcome, trace.outcome_source) == (result.outcome, "root_span"), result.task_id
        assert trace.score == pytest.approx(result.score)
        assert (trace.task_id, trace.release) == (result.task_id, "r1")
        assert trace.finalized_at is not None
