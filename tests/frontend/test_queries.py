"""Lists cost the same number of queries with 5 rows or 50, and pages by keyset: every trace exactly once, in
order, forwards and back, including ties on the start time and traces with none."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.models import DiagnosisRun, Feedback
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
            spans.append(Span(project=project, trace=trace, span_id=f"s{j}", parent_span_id=parent, name=f"{node}",
                              kind="AGENT", node=node, start_time=trace.start_time + timedelta(seconds=j),
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


@pytest.mark.parametrize("page", ["", "traces/", "nodes/", "workflow/", "runs/", "settings/rubrics/"])
def test_pages_cost_the_same_queries_with_5_or_50_rows(project, owner, page):
    client = client_for(owner)
    _traces(project, 5)
    for i in range(5):
        rubric_create(project=project, name=f"rubric {i}", kind="tool_never", config={"tool": f"t{i}"})
        DiagnosisRun.objects.create(project=project, name=f"run {i}", created_by=owner)
    url = f"/p/{project.slug}/{page}"
    client.get(url)  # warm up: the session and content types
    small = _count(client, url)
    _traces(project, 45, offset=5)
    for i in range(5, 50):
        rubric_create(project=project, name=f"rubric {i}", kind="tool_never", config={"tool": f"t{i}"})
        DiagnosisRun.objects.create(project=project, name=f"run {i}", created_by=owner)
    assert _count(client, url) == small, url


def test_nodes_and_graph_queries_do_not_grow_with_nodes(project, owner):
    client = client_for(owner)
    trace = Trace.objects.create(project=project, trace_id="f" * 32, start_time=T0, end_time=T0 + timedelta(minutes=5))

    def add_nodes(start: int, stop: int):
        Span.objects.bulk_create([
            Span(project=project, trace=trace, span_id=f"{i:016x}", parent_span_id="" if i == 0 else f"{i - 1:016x}",
                 name=f"agent {i}", kind="AGENT", node=f"node-{i}", start_time=T0 + timedelta(seconds=i),
                 end_time=T0 + timedelta(seconds=i + 1))
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
    Span.objects.bulk_create([Span(project=project, trace=trace, span_id=f"x{i}", parent_span_id="s1", name="tool",
                                   kind="TOOL", node="worker", start_time=trace.start_time + timedelta(seconds=1),
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
