"""Lists cost the same number of queries with 5 rows or 50, and pages by keyset: every trace exactly once, in
order, forwards and back, including ties on the start time and traces with none."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightOccurrence, InsightStatement
from diagnosis.tickets.models import Ticket
from diagnosis.services import rubric_create
from tests.frontend.conftest import client_for
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 2, 1, 12, 0, tzinfo=timezone.utc)


def _traces(project, n: int, *, offset: int = 0) -> list[Trace]:
    traces = Trace.objects.bulk_create([
        Trace(project=project, trace_id=f"{offset + i:032x}", name=f"task {offset + i}", task_id=f"t-{offset + i}",
              start_time=T0 + timedelta(minutes=offset + i), end_time=T0 + timedelta(minutes=offset + i, seconds=3),
              outcome="failure" if i % 3 == 0 else "success", release="r1", span_count=3)
        for i in range(n)
    ])
    spans = []
    for trace in traces:
        for j, (node, parent) in enumerate((("desk", ""), ("worker", "s0"), ("writer", "s0"))):
            spans.append(Span(project=project, trace=trace, trace_day=trace.first_received_day, span_id=f"s{j}",
                              parent_span_id=parent, name=f"{node}", kind="AGENT", node=node,
                              start_time=trace.start_time + timedelta(seconds=j),
                              end_time=trace.start_time + timedelta(seconds=j + 1), status="error" if j == 1 else "ok"))
    Span.objects.bulk_create(spans)
    run = DiagnosisRun.objects.create(project=project, status="succeeded", total_count=n, done_count=n)
    Feedback.objects.bulk_create([Feedback(run=run, project=project, trace=t, target_span_id="s2", judge="rule.loop",
                                           judge_kind="rule", verdict="fail") for t in traces])
    return traces


def _count(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(queries)


def _insights(project, n: int, *, offset: int = 0, frequency=None) -> list[Insight]:
    """n insights (system and node level, some "other" buckets), each with a ticket, an occurrence in an insights
    run and statements at two nodes; the frequencies repeat so the pages have ties."""
    run = (DiagnosisRun.objects.filter(project=project, insights_status="done").first()
           or DiagnosisRun.objects.create(project=project, name="insights", status="succeeded",
                                          insights_status="done"))
    traces = list(Trace.objects.filter(project=project).order_by("pk")[:3])
    insights = []
    for i in range(offset, offset + n):
        level = "system" if i % 2 else "node"
        insights.append(Insight.objects.create(
            project=project, level=level, node="" if level == "system" else f"node-{i % 4}", is_other=i in (8, 17),
            title=f"insight {i}", frequency=(i % 7) / 10 if frequency is None else frequency, count=i,
            fingerprint=f"fp{i}", severity="high" if i % 3 == 0 else "medium"))
    for insight in insights:
        InsightOccurrence.objects.create(insight=insight, run=run, releases={"r1": 1})
        Ticket.objects.create(project=project, insight=insight, fingerprint=insight.fingerprint, title=insight.title,
                              frequency=insight.frequency, node=insight.node, level=insight.level)
        for position, trace in enumerate(traces):
            feedback, _ = Feedback.objects.get_or_create(
                run=run, project=project, trace=trace, judge="rule.loop", target_span_id="s1",
                defaults={"judge_kind": "rule", "verdict": "fail"})
            InsightStatement.objects.create(
                project=project, run=run, feedback=feedback, trace=trace, position=insight.pk * 10 + position,
                kind="issue", text="t", node=("worker", "writer")[position % 2], judge="rule.loop",
                **{"system_insight" if insight.level == "system" else "node_insight": insight})
    return insights


LIST_PAGES = ["", "traces/", "nodes/", "nodes/?level=node", "workflow/", "runs/", "settings/rubrics/", "insights/",
              "insights/?level=system&release=r1", "tickets/", "tickets/?status=all"]


@pytest.mark.parametrize("page", LIST_PAGES)
def test_pages_cost_the_same_queries_with_5_or_50_rows(project, owner, page):
    client = client_for(owner)
    _traces(project, 5)
    _insights(project, 5)
    for i in range(5):
        rubric_create(project=project, name=f"rubric {i}", kind="tool_never", config={"tool": f"t{i}"})
        DiagnosisRun.objects.create(project=project, name=f"run {i}", created_by=owner)
    url = f"/p/{project.slug}/{page}"
    client.get(url)  # warm up: the session and content types
    small = _count(client, url)
    _traces(project, 45, offset=5)
    _insights(project, 45, offset=5)
    for i in range(5, 50):
        rubric_create(project=project, name=f"rubric {i}", kind="tool_never", config={"tool": f"t{i}"})
        DiagnosisRun.objects.create(project=project, name=f"run {i}", created_by=owner)
    assert _count(client, url) == small, url


def _walk(client, url: str) -> tuple[list, list[str]]:
    """Every page from the first, following the next links; returns the items and the URLs visited."""
    seen, urls, next_url = [], [], url
    while next_url:
        response = client.get(next_url)
        page = response.context["page"]
        seen += list(page.items)
        urls.append(next_url)
        next_url = None
        if page.next_cursor:
            assert 'rel="next"' in response.content.decode()
            next_url = url + ("&" if "?" in url else "?") + f"cursor={page.next_cursor}"
    return seen, urls


@pytest.mark.parametrize("kind", ["insights", "tickets"])
def test_insight_and_ticket_pages_walk_every_row_once_in_order(project, owner, kind):
    client = client_for(owner)
    _traces(project, 3)
    _insights(project, 130)
    _insights(project, 12, offset=130, frequency=0.3)  # a run of ties across a page boundary
    base = f"/p/{project.slug}/{kind}/"
    if kind == "insights":
        rows = list(Insight.objects.filter(project=project))
        expected = [i.pk for i in sorted(rows, key=lambda i: (-(i.frequency - 2 if i.is_other else i.frequency),
                                                              -i.pk))]
        url = base
    else:
        rows = list(Ticket.objects.filter(project=project))
        expected = [t.pk for t in sorted(rows, key=lambda t: (-t.frequency, -t.pk))]
        url = base + "?status=all"
    items, urls = _walk(client, url)
    assert [i.pk for i in items] == expected and len(urls) == 3  # 142 rows, 50 a page
    # Back from the last page: the previous pages come back the same.
    last = client.get(urls[-1]).context["page"]
    back = client.get(url + ("&" if "?" in url else "?") + f"cursor={last.prev_cursor}").context["page"]
    assert [i.pk for i in back.items] == expected[50:100]
    html = client.get(urls[1]).content.decode()
    assert "Less frequent ›" in html and "‹ More frequent" in html and "« Most frequent" in html


def test_insight_pages_keep_the_filters(project, owner):
    client = client_for(owner)
    _traces(project, 3)
    _insights(project, 160)  # 80 at node level, 53 of them medium
    url = f"/p/{project.slug}/insights/?level=node&severity=medium"
    items, urls = _walk(client, url)
    expected = Insight.objects.filter(project=project, level="node", severity="medium")
    assert sorted(i.pk for i in items) == sorted(expected.values_list("pk", flat=True)) and len(urls) == 2
    html = client.get(url).content.decode()
    assert "level=node&amp;severity=medium&amp;cursor=" in html
    # A cursor that does not decode is the first page, not an error.
    assert client.get(url + "&cursor=%%%").context["page"].is_first


def test_nodes_and_graph_queries_do_not_grow_with_nodes(project, owner):
    client = client_for(owner)
    trace = Trace.objects.create(project=project, trace_id="f" * 32, start_time=T0, end_time=T0 + timedelta(minutes=5))

    def add_nodes(start: int, stop: int):
        Span.objects.bulk_create([
            Span(project=project, trace=trace, trace_day=trace.first_received_day, span_id=f"{i:016x}",
                 parent_span_id="" if i == 0 else f"{i - 1:016x}", name=f"agent {i}", kind="AGENT", node=f"node-{i}",
                 start_time=T0 + timedelta(seconds=i), end_time=T0 + timedelta(seconds=i + 1))
            for i in range(start, stop)])

    add_nodes(0, 5)
    urls = [f"/p/{project.slug}/nodes/", f"/p/{project.slug}/workflow/", f"/p/{project.slug}/traces/{trace.trace_id}/"]
    for url in urls:
        client.get(url)
    small = [_count(client, url) for url in urls]
    add_nodes(5, 50)
    assert [_count(client, url) for url in urls] == small


def test_trace_viewer_queries_do_not_grow_with_spans_or_feedback(project, owner):
    client = client_for(owner)
    (trace,) = _traces(project, 1)
    url = f"/p/{project.slug}/traces/{trace.trace_id}/?span=s1"
    client.get(url)
    small = _count(client, url)
    Span.objects.bulk_create([Span(project=project, trace=trace, trace_day=trace.first_received_day, span_id=f"x{i}",
                                   parent_span_id="s1", name="tool", kind="TOOL", node="worker",
                                   start_time=trace.start_time + timedelta(seconds=1),
                                   end_time=trace.start_time + timedelta(seconds=2), input={"i": i})
                              for i in range(50)])
    run = DiagnosisRun.objects.get(project=project)
    Feedback.objects.bulk_create([Feedback(run=run, project=project, trace=trace, target_span_id=f"x{i}",
                                           judge="rule.span_error", judge_kind="rule", verdict="fail",
                                           issues=[{"title": "t", "evidence": [{"span_id": "s1", "quote": "x"}]}])
                                  for i in range(50)])
    assert _count(client, url) == small


def test_trace_pages_walk_every_trace_once_in_order(project, owner):
    client = client_for(owner)
    traces = _traces(project, 120)
    # Ties on the start time and traces without one (not yet finalised) still page exactly.
    Trace.objects.filter(pk__in=[t.pk for t in traces[40:46]]).update(start_time=T0 + timedelta(minutes=40))
    Trace.objects.filter(pk__in=[t.pk for t in traces[:3]]).update(start_time=None)
    expected = list(Trace.objects.filter(project=project).order_by("-start_time", "-pk")
                    .values_list("trace_id", flat=True))
    expected = [t for t in expected if t not in {x.trace_id for x in traces[:3]}] + \
        [t.trace_id for t in sorted(traces[:3], key=lambda t: -t.pk)]
    seen, cursors, url = [], [], f"/p/{project.slug}/traces/"
    while True:
        response = client.get(url)
        page = response.context["page"]
        seen += [t.trace_id for t in page.items]
        cursors.append(url)
        if not page.next_cursor:
            break
        assert 'rel="next"' in response.content.decode()
        url = f"/p/{project.slug}/traces/?cursor={page.next_cursor}"
    assert seen == expected
    assert len(cursors) == 3  # 120 traces, 50 a page
    # Back from the last page: the newer pages come back the same.
    page = client.get(url).context["page"]
    back = client.get(f"/p/{project.slug}/traces/?cursor={page.prev_cursor}").context["page"]
    assert [t.trace_id for t in back.items] == expected[50:100]
    first = client.get(f"/p/{project.slug}/traces/?cursor={back.prev_cursor}").context["page"]
    assert [t.trace_id for t in first.items] == expected[:50] and first.prev_cursor is None and first.is_first


def test_filtered_pages_keep_the_filter(project, owner):
    client = client_for(owner)
    _traces(project, 120)
    response = client.get(f"/p/{project.slug}/traces/?outcome=failure")
    page = response.context["page"]
    assert len(page.items) == 40 and page.next_cursor is None
    html = client.get(f"/p/{project.slug}/traces/?outcome=success").content.decode()
    assert "outcome=success&amp;cursor=" in html


def test_runs_page_by_keyset(project, owner):
    client = client_for(owner)
    for i in range(35):
        DiagnosisRun.objects.create(project=project, name=f"run {i:02d}")
    first = client.get(f"/p/{project.slug}/runs/").context["page"]
    second = client.get(f"/p/{project.slug}/runs/?cursor={first.next_cursor}").context["page"]
    names = [r.name for r in first.items + second.items]
    assert len(names) == len(set(names)) == 35 and second.next_cursor is None
