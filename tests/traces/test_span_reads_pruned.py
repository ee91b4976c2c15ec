"""Span reads that know their traces name the traces' days too (Span.trace_day = Trace.first_received_day), so on
Postgres each is planned against those days' partitions of `traces_span` only, not every day's (issue 30). The
readers still return what they did, on both databases (the portable twins too)."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.clustering.stats import TraceInfo
from diagnosis.insights.facts import insight_by_design, insight_offline_text
from diagnosis.insights.statements import Draft, _span_nodes
from diagnosis.insights.verify import evidence_verified
from diagnosis.models import DiagnosisRun, RunTrace
from diagnosis.selectors.heatmap import node_judged_trace_counts
from diagnosis.services.runs import node_stats_build
from diagnosis.tickets.fix import _span_pick
from tests.conftest import postgres_only
from traces.models import Span, Trace
from traces.selectors import span_node_figures, span_node_status_list, span_workflow, trace_days_for
from traces.selectors.graph import _workflow_rows
from traces.services import partitions
from traces.services.imports import span_keys_stored

pytestmark = pytest.mark.django_db
DAYS = [date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)]  # the read traces' days, then an unread trace's
T0 = datetime(2024, 1, 1, 9, tzinfo=timezone.utc)


@pytest.fixture
def traces(project):
    """Three traces read (two first received on DAYS[0], one on DAYS[1]), one not read (DAYS[2]); each an agent
    `desk` calling a tool `lookup` that errors, whose output is empty."""
    partitions.span_partitions_ensure(days=DAYS)  # Postgres: their own partitions (SQLite: nothing to do)
    made = []
    for i, day in enumerate([DAYS[0], DAYS[0], DAYS[1], DAYS[2]]):
        trace = Trace.objects.create(project=project, trace_id=f"{i:032x}", first_received_day=day,
                                     start_time=T0 + timedelta(minutes=i), outcome="failure" if i % 2 else "success")
        start = trace.start_time
        Span.objects.bulk_create([
            Span(project=project, trace=trace, trace_day=day, span_id="a" * 16, name="desk", kind="AGENT",
                 node="desk", start_time=start, end_time=start + timedelta(seconds=3), output={"text": "done"}),
            Span(project=project, trace=trace, trace_day=day, span_id="b" * 16, parent_span_id="a" * 16,
                 name="lookup", kind="TOOL", node="desk", tool_name="lookup", status="error",
                 start_time=start + timedelta(seconds=1), end_time=start + timedelta(seconds=2), output="",
                 input={"q": "refund"})])
        made.append(trace)
    return made


def _read_everything(project, read: list[Trace]) -> dict:
    """Every span reader that knows its traces, over `read`; what each returns."""
    pks = [t.pk for t in read]
    run = DiagnosisRun.objects.create(project=project, name="r", status="running", total_count=len(read))
    RunTrace.objects.bulk_create([RunTrace(run=run, trace=t, status="done") for t in read])
    pairs = {(pk, "b" * 16) for pk in pks}
    drafts = [Draft(feedback_id=0, trace_pk=t.pk, trace_id=t.trace_id, release="", position=0, kind="issue",
                    text="empty", node="desk", span_id="b" * 16, judge="rule.empty_output", severity="low")
              for t in read]
    infos = {str(t.pk): TraceInfo(failed=t.outcome == "failure") for t in read}
    evidence = [SimpleNamespace(trace=t, trace_id=t.pk, span_id="b" * 16, feedback_id=0) for t in read]
    return {
        "days": trace_days_for(project=project, trace_pks=pks),
        "days_subquery": trace_days_for(project=project, trace_pks=Trace.objects.filter(pk__in=pks).values("pk")),
        "figures": span_node_figures(project=project, trace_pks=pks),
        "figures_portable": span_node_figures.portable(project=project, trace_pks=pks),
        "status": sorted(span_node_status_list(project=project, pairs=pairs)),
        "status_portable": sorted(span_node_status_list.portable(project=project, pairs=pairs)),
        "workflow": span_workflow(project=project, trace_pks=pks),
        "workflow_rows": sorted(r[:5] for r in _workflow_rows(project=project, trace_pks=pks)),
        "workflow_rows_portable": sorted(r[:5] for r in _workflow_rows.portable(project=project, trace_pks=pks)),
        "heatmap": node_judged_trace_counts(project=project, run=run),
        "node_stats": sorted(node_stats_build(run=run)),
        "verified": sorted(evidence_verified(project_id=project.pk, pairs=pairs).texts),
        "span_nodes": sorted(_span_nodes(pairs, project_id=project.pk)),
        "offline": insight_offline_text(project_id=project.pk, rows=list(range(len(read))), drafts=drafts,
                                        traces=infos).root_cause,
        "by_design": insight_by_design(project_id=project.pk, rows=list(range(len(read))), drafts=drafts,
                                       traces=infos),
        "fix_span": _span_pick(SimpleNamespace(level="node", node="desk"), evidence,
                               {0: SimpleNamespace(target_span_id="")})[1].span_id,
        "stored": sorted(span_keys_stored(project=project, keys={(t.trace_id, "b" * 16) for t in read}
                                          | {("e" * 32, "b" * 16)})),
    }


def test_the_readers_return_the_read_traces_spans_only(project, traces):
    read = traces[:3]
    got = _read_everything(project, read)
    assert got["days"] == got["days_subquery"] == DAYS[:2]
    expected = {"desk": {"spans": 6, "traces": 3, "errors": 3, "agent_spans": 3}}
    assert got["figures"] == got["figures_portable"] == got["workflow"][0] == expected
    assert got["status"] == got["status_portable"] == [("desk", "error")] * 3
    assert got["workflow_rows"] == got["workflow_rows_portable"]
    assert len(got["workflow_rows"]) == 1 + 1 + 3  # the node's figures, its call (desk→desk), its agent spans
    assert got["heatmap"] == {"desk": 3}
    assert got["node_stats"] and got["span_nodes"] == got["verified"] == sorted((t.pk, "b" * 16) for t in read)
    assert "in 3 of 3 traces" in got["offline"] and got["by_design"] is True
    assert got["fix_span"] == "b" * 16
    assert got["stored"] == sorted((t.trace_id, "b" * 16) for t in read)
    assert trace_days_for(project=project, trace_pks=[]) == []


def _partitions_read(sql: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return set(re.findall(rf"\b{partitions.TABLE}_(?:p\d{{8}}|default)\b", plan))


@postgres_only
def test_every_span_read_is_planned_against_its_traces_days_only(project, traces):
    assert partitions.span_table_is_partitioned()
    with CaptureQueriesContext(connection) as queries:
        _read_everything(project, traces[:3])
    span_reads = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith("INSERT")
                  and re.search(rf'\b(FROM|JOIN) "?{partitions.TABLE}"?\s', q["sql"])]
    assert len(span_reads) >= 12
    wanted = {partitions.partition_name(day) for day in DAYS[:2]}
    for sql in span_reads:
        read = _partitions_read(sql)
        assert read and read <= wanted, (read, sql)
