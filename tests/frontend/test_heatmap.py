"""The node × insight heat map on the Nodes page: a hand-built run with known shares (each cell's value, shade and
link), then the example support desk (the planted bugs light up their nodes; a cell opens that node's evidence)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from diagnosis.models import (DiagnosisRun, Feedback, Insight, InsightEvidence, InsightOccurrence, InsightStatement,
                              RunTrace)
from diagnosis.services.insights import insights_build
from tests.frontend.conftest import PAYLOADS, client_for
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)


def _cell(html: str, node: str, insight: Insight) -> str:
    row = re.search(rf'<tr data-heat-node="{re.escape(node)}">(.*?)</tr>', html, re.S)
    assert row, node
    cell = re.search(rf'<td class="heat heat-(\d)" data-insight="{insight.pk}" data-traces="(\d+)">(.*?)</td>',
                     row.group(1), re.S)
    assert cell, (node, insight.pk)
    return cell.group(0)


def _build(project, *, traces: int = 20):
    """20 judged traces, each with spans at planner and writer; billing spans in the first 10 only. Insight A: 10
    traces at billing (100% of billing's judged traces) and 2 at writer (10%); insight B: 1 trace at writer (5%).
    One statement at writer for A is marked wrong (excluded) and must not count."""
    run = DiagnosisRun.objects.create(project=project, name="hand-built", status="succeeded",
                                      insights_status="done", total_count=traces, done_count=traces)
    rows, spans = [], []
    for i in range(traces):
        trace = Trace.objects.create(project=project, trace_id=f"{i:032x}", start_time=T0 + timedelta(minutes=i))
        rows.append(trace)
        nodes = ["planner", "writer"] + (["billing"] if i < 10 else [])
        spans += [Span(project=project, trace=trace, trace_day=trace.first_received_day, span_id=f"{j:016x}", name=n,
                       node=n, kind="AGENT", start_time=trace.start_time) for j, n in enumerate(nodes)]
    Span.objects.bulk_create(spans)
    RunTrace.objects.bulk_create([RunTrace(run=run, trace=t, status="done") for t in rows]
                                 + [RunTrace(run=run, trace=Trace.objects.create(project=project, trace_id="f" * 32),
                                             status="skipped")])
    a = Insight.objects.create(project=project, level="system", title="Refunds double-charged " + PAYLOADS["script"],
                               frequency=0.6, fingerprint="a")
    b = Insight.objects.create(project=project, level="system", title="Tone too curt", frequency=0.05,
                               fingerprint="b")
    Insight.objects.create(project=project, level="system", title="other", is_other=True, frequency=0.9)
    for insight in (a, b):
        InsightOccurrence.objects.create(insight=insight, run=run)

    def statement(trace, node, insight, *, excluded=False, position=0):
        feedback, _ = Feedback.objects.get_or_create(run=run, project=project, trace=trace, judge=f"j.{node}",
                                                     target_span_id="0" * 16,
                                                     defaults={"judge_kind": "rule", "verdict": "fail"})
        return InsightStatement.objects.create(project=project, run=run, feedback=feedback, trace=trace,
                                               position=position, kind="issue", text=f"{node} fails", node=node,
                                               judge=feedback.judge, system_insight=insight, excluded=excluded)

    for trace in rows[:10]:
        statement(trace, "billing", a)
        statement(trace, "billing", a, position=1)  # two statements, one trace
    statement(rows[0], "writer", a)
    statement(rows[15], "writer", a)
    statement(rows[16], "writer", a, excluded=True)
    quoted = statement(rows[3], "writer", b)
    InsightEvidence.objects.create(insight=b, run=run, trace=rows[3], span_id="0" * 16, feedback=quoted.feedback,
                                   statement=quoted, statement_text="curt at writer", quote="Fine.")
    billing = InsightStatement.objects.filter(system_insight=a, node="billing").first()
    InsightEvidence.objects.create(insight=b, run=run, trace=billing.trace, span_id="0" * 15 + "2",
                                   feedback=billing.feedback, statement=billing, statement_text="curt at billing",
                                   quote="")
    return run, a, b


def test_cells_are_shares_of_the_nodes_judged_traces(project, owner):
    run, a, b = _build(project)
    client = client_for(owner)
    html = client.get(f"/p/{project.slug}/nodes/").content.decode()
    assert 'data-testid="heatmap-table"' in html
    assert html.index('<tr data-heat-node="billing">') < html.index('<tr data-heat-node="writer">')  # hottest row first
    billing_a = _cell(html, "billing", a)
    assert 'data-traces="10"' in billing_a and "100%" in billing_a and "10/10" in billing_a and "heat-5" in billing_a
    writer_a = _cell(html, "writer", a)  # 2 of 20: the excluded statement does not count
    assert 'data-traces="2"' in writer_a and "10%" in writer_a and "2/20" in writer_a and "heat-2" in writer_a
    writer_b = _cell(html, "writer", b)
    assert "5%" in writer_b and "1/20" in writer_b and "heat-2" in writer_b
    planner_b = _cell(html, "planner", b)
    assert "0%" in planner_b and "0/20" in planner_b and "heat-0" in planner_b
    assert f'href="/p/{project.slug}/insights/{a.pk}/?node=billing"' in billing_a
    # Columns: the run's insights, most frequent first, never the "other" bucket; titles escaped.
    assert html.index(f"/insights/{a.pk}/\" title=") < html.index(f"/insights/{b.pk}/\" title=")
    assert ">other<" not in html and PAYLOADS["script"] not in html and "&lt;script&gt;" in html

    # The cell's link: the insight's evidence at that node only.
    page = client.get(f"/p/{project.slug}/insights/{b.pk}/?node=writer").content.decode()
    assert "curt at writer" in page and "curt at billing" not in page
    assert 'data-testid="evidence-node-filter"' in page
    assert "curt at billing" in client.get(f"/p/{project.slug}/insights/{b.pk}/").content.decode()
    assert "No verified citation at this node" in client.get(
        f"/p/{project.slug}/insights/{b.pk}/?node=planner").content.decode()


def test_run_and_level_choices_and_empty_states(project, owner):
    client = client_for(owner)
    trace = Trace.objects.create(project=project, trace_id="1" * 32)
    Span.objects.create(project=project, trace=trace, trace_day=trace.first_received_day, span_id="1" * 16, name="x",
                        node="planner", start_time=T0)
    html = client.get(f"/p/{project.slug}/nodes/").content.decode()
    assert 'data-testid="heatmap-empty"' in html and "Start a diagnosis run" in html
    run, a, _ = _build(project)
    older = DiagnosisRun.objects.create(project=project, name="older", insights_status="done")
    DiagnosisRun.objects.filter(pk=older.pk).update(created_at=T0)
    html = client.get(f"/p/{project.slug}/nodes/").content.decode()
    assert f'<option value="{run.pk}" selected' in html  # the newest run with insights by default
    html = client.get(f"/p/{project.slug}/nodes/?run={older.pk}").content.decode()
    assert "found no system-level insight" in html
    html = client.get(f"/p/{project.slug}/nodes/?run={run.pk}&level=node").content.decode()
    assert "found no node-level insight" in html
    response = client.get(f"/p/{project.slug}/nodes/?run=not-a-run&level=bogus")
    assert response.status_code == 200 and "showing the newest one" in response.content.decode()
    assert f'data-insight="{a.pk}"' in response.content.decode()
    # The release filter keeps the heat map's choices.
    html = client.get(f"/p/{project.slug}/nodes/?run={run.pk}&level=system").content.decode()
    assert f'<input type="hidden" name="run" value="{run.pk}">' in html


def test_support_desk_bugs_light_up_their_nodes(seeded, owner):
    project = seeded.project
    insights_build(run=seeded.run)
    client = client_for(owner)
    html = client.get(f"/p/{project.slug}/nodes/?level=node").content.decode()
    for node in ("mediator", "billing_worker"):
        insight = Insight.objects.filter(project=project, level="node", node=node, is_other=False).order_by(
            "-frequency").first()
        assert insight is not None, node
        cell = _cell(html, node, insight)
        assert "heat-0" not in cell, (node, cell)
        # Node-level insights only ever light their own node's row.
        for other in ("planner", "writer"):
            if f'<tr data-heat-node="{other}">' in html:
                assert "heat-0" in _cell(html, other, insight)
        link = re.search(r'href="([^"]+)"', cell).group(1).replace("&amp;", "&")
        page = client.get(link).content.decode()
        assert 'data-testid="insight-evidence-link"' in page, link
    system = client.get(f"/p/{project.slug}/nodes/").content.decode()
    assert 'data-testid="heatmap-table"' in system
