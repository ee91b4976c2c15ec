"""Issue 29, item 3 and issue 42, item 2: failure attribution on the insight page ("Where it went wrong"), the
ticket list, the ticket body and the API.

- The insight page blames one node only when most of the confident answers name it (one attribution a trace:
  "learned" over "heuristic" over the LLM methods), counting per node the confident answers with their mean
  confidence, and links the answers to the trace page at the decisive span. An unconfident answer names no node: it
  shows "no confident answer" and its candidates with the evidence for each. Without attributions it says how to
  compute them.
- Each ticket row shows its insight's blamed node, or "no confident answer" and the candidates, computed for the
  whole page at once.
- Another project's attributions never show; the summary costs a fixed number of queries.
"""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest

from diagnosis.attribution.models import Attribution
from diagnosis.attribution.selectors import attribution_summary_for_insight, attribution_summary_map
from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightStatement
from diagnosis.tickets.models import Ticket
from tests.api.conftest import T0, make_trace
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

SPAN = f"{11:016x}"  # make_trace's second span


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))


def _section(html: str, testid: str) -> str:
    start = html.index(f'data-testid="{testid}"')
    return html[start:html.index("</section>", start)]


def _insight(project, *, title: str, node: str = "orders_worker", level: str = Insight.Level.NODE) -> Insight:
    return Insight.objects.create(project=project, level=level, node=node if level == Insight.Level.NODE else "",
                                  title=title, count=1, trace_count=1, frequency=0.5, last_seen=T0)


def _members(project, insight: Insight, traces, *, excluded: bool = False) -> None:
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.SUCCEEDED, judges=["rules"])
    field = "node_insight" if insight.level == Insight.Level.NODE else "system_insight"
    for trace in traces:
        feedback = Feedback.objects.create(run=run, project=project, trace=trace, judge="rule.loop", judge_kind="rule",
                                           verdict=Feedback.Verdict.FAIL)
        for position in range(2):  # two statements, one member trace
            InsightStatement.objects.create(project=project, run=run, feedback=feedback, trace=trace,
                                            position=position, kind="issue", text="loops", node=insight.node,
                                            judge="rule.loop", excluded=excluded, **{field: insight})


def _attribute(trace, agent: str, confidence: float | None, *, method: str = "heuristic", project=None,
               status: str = Attribution.Status.OK, **details) -> Attribution:
    return Attribution.objects.create(project=project or trace.project, trace=trace, method=method, status=status,
                                      agent=agent if status == Attribution.Status.OK else "", span_id=SPAN,
                                      step_index=3, confidence=confidence, reason=f"{agent} went wrong",
                                      details=details)


def _trace(project, index: int, outcome: str | None = "failure"):
    return make_trace(project, trace_id=f"{index:032x}", start=T0 + timedelta(minutes=index), outcome=outcome)


@pytest.fixture
def attributed(project, outsider_project):
    """An insight of 5 failing member traces (3 attributed) and a succeeding one, a failing trace outside it, and
    another project's attributions, one of them (wrongly) on this project's trace."""
    f1, f2, f3, f4, f5 = (_trace(project, i) for i in range(1, 6))
    succeeded, outside = _trace(project, 6, outcome="success"), _trace(project, 7)
    insight = _insight(project, title="Loops on the order lookup")
    _members(project, insight, [f1, f2, f3, f4, f5, succeeded])
    _attribute(f1, "orders_worker", 0.9)
    _attribute(f2, "orders_worker", 0.5)
    _attribute(f2, "orders_worker", 0.7, method="learned", low_confidence=False)  # preferred over the heuristic
    _attribute(f3, "", 0.2, method="learned", status=Attribution.Status.INCONCLUSIVE, confident=False,
               candidates=[{"agent": "planner", "step": 0, "span_id": SPAN, "share": 0.2,
                            "evidence": ["it handed its output to another agent"]},
                           {"agent": "orders_worker", "step": 3, "span_id": SPAN, "share": 0.15, "evidence": []}])
    _attribute(f3, "orders_worker", 0.6)
    _attribute(f3, "writer", 0.95, method="all_at_once")
    _attribute(f4, "", None, status=Attribution.Status.ERROR)
    _attribute(succeeded, "writer", 0.99)  # not a failing trace
    _attribute(outside, "writer", 0.99)  # not a member
    _attribute(f5, "intruder", 0.99, method="binary_search", project=outsider_project)
    theirs = _trace(outsider_project, 8)
    their_insight = _insight(outsider_project, title="Their pattern")
    _members(outsider_project, their_insight, [theirs])
    _attribute(theirs, "intruder", 0.99)
    return insight


def test_the_summary_prefers_learned_counts_failing_members_only_and_stays_in_the_project(
        project, attributed, django_assert_max_num_queries):
    with django_assert_max_num_queries(2):
        summary = attribution_summary_for_insight(project=project, insight=attributed)
    assert (summary["failing"], summary["attributed"], summary["unattributed"]) == (5, 3, 2)
    assert summary["agents"] == [{"agent": "orders_worker", "count": 2, "mean_confidence": pytest.approx(0.8)}]
    assert (summary["confident"], summary["blamed"], summary["confident_count"], summary["unconfident_count"]) == \
        (True, "orders_worker", 2, 1)
    top = [(r["trace_id"], r["method"], r["agent"], r["confidence"], r["confident"]) for r in summary["top"]]
    assert top == [(f"{1:032x}", "heuristic", "orders_worker", 0.9, True),
                   (f"{2:032x}", "learned", "orders_worker", 0.7, True),
                   (f"{3:032x}", "learned", "", 0.2, False)]
    assert [c["agent"] for c in summary["top"][2]["candidates"]] == ["planner", "orders_worker"]
    assert summary["top"][0]["span_id"] == SPAN and summary["top"][0]["step_index"] == 3


def test_the_summary_costs_two_queries_for_many_insights(project, django_assert_max_num_queries):
    insights = []
    for i in range(6):
        insight = _insight(project, title=f"pattern {i}", level=Insight.Level.SYSTEM if i % 2 else Insight.Level.NODE)
        traces = [_trace(project, i * 10 + j) for j in range(3)]
        _members(project, insight, traces)
        for trace in traces:
            _attribute(trace, f"node{i}", 0.5)
        insights.append(insight)
    with django_assert_max_num_queries(2):
        summaries = attribution_summary_map(project=project, insight_ids=[i.pk for i in insights])
    assert [summaries[i.pk]["agents"][0]["agent"] for i in insights] == [f"node{i}" for i in range(6)]
    assert all(summaries[i.pk]["attributed"] == 3 for i in insights)


def test_an_excluded_statement_makes_no_member(project):
    insight = _insight(project, title="wrongly judged")
    trace = _trace(project, 1)
    _members(project, insight, [trace], excluded=True)
    _attribute(trace, "orders_worker", 0.9)
    assert attribution_summary_for_insight(project=project, insight=insight)["failing"] == 0


def test_another_projects_insight_gets_nothing(project, outsider_project, attributed):
    theirs = Insight.objects.get(project=outsider_project)
    assert attribution_summary_for_insight(project=project, insight=theirs)["attributed"] == 0
    assert attribution_summary_map(project=project, insight_ids=[theirs.pk])[theirs.pk]["attributed"] == 0


def test_the_insight_page_says_where_it_went_wrong(project, owner, attributed):
    client = client_for(owner)
    html = client.get(f"/p/{project.slug}/insights/{attributed.pk}/").content.decode()
    section = _section(html, "insight-attribution")
    text = _text(section)
    assert "Where it went wrong" in text
    assert "Blamed: orders_worker (most of the 2 confident answers; 1 trace without a confident answer)" in text
    assert "orders_worker: 2 of 2 confident answers, confidence 0.80" in text
    assert 'data-testid="attribution-row-unconfident"' in section and "planner" in text  # a candidate, not blamed
    assert 'data-agent="planner"' not in section
    assert "2 of its 5 failing traces are not attributed yet" in text
    # a button, not a command to type (issue 40)
    assert f'action="/p/{project.slug}/insights/{attributed.pk}/attribute/"' in section and "Attribute them" in text
    assert "intruder" not in html and "writer" not in section
    links = re.findall(r'href="([^"]+)" data-testid="attribution-link"', section)
    # the unconfident answer names no span: its row links the trace
    assert links == [f"/p/{project.slug}/traces/{i:032x}/?span={SPAN}#row-{SPAN}" for i in (1, 2)] \
        + [f"/p/{project.slug}/traces/{3:032x}/"]
    assert client.get(unescape(links[0])).status_code == 200


def test_the_insight_page_without_attributions_says_how_to_compute_them(project, owner):
    insight = _insight(project, title="Not attributed")
    _members(project, insight, [_trace(project, 1), _trace(project, 2)])
    html = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    section = _section(html, "insight-attribution")
    assert 'data-testid="attribution-empty"' in section and 'data-testid="attribution-row"' not in section
    assert "None of its 2 failing traces are attributed yet." in _text(section)
    assert 'data-testid="attribute-form"' in section and "Attribute them" in _text(section)


def test_the_attribute_button_attributes_the_insights_failing_traces(project, owner, outsider,
                                                                      django_capture_on_commit_callbacks):
    from diagnosis.attribution.models import Attribution

    insight = _insight(project, title="Not attributed")
    traces = [_trace(project, 1), _trace(project, 2)]
    _members(project, insight, traces)
    assert client_for(outsider).post(f"/p/{project.slug}/insights/{insight.pk}/attribute/").status_code == 404
    assert client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/attribute/").status_code == 405
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(owner).post(f"/p/{project.slug}/insights/{insight.pk}/attribute/", follow=True)
    assert "Attribution queued" in response.content.decode()
    assert set(Attribution.objects.filter(project=project, method="learned").values_list("trace_id", flat=True)) \
        == {t.pk for t in traces}


def _ticket(project, insight, fingerprint: str) -> Ticket:
    return Ticket.objects.create(project=project, insight=insight, fingerprint=fingerprint, title=insight.title,
                                 level=insight.level, node=insight.node, severity="high", frequency=0.5)


def _rows(html: str) -> dict[str, str]:
    return {m.group(1): _text(m.group(2)) for m in re.finditer(
        r'<tr id="ticket-(\d+)".*?data-testid="ticket-attribution">(.*?)</td>', html, re.S)}


def test_the_ticket_list_shows_each_tickets_most_blamed_node(project, owner, outsider_project, attributed,
                                                             django_assert_max_num_queries):
    low = _insight(project, title="Guessed", node="planner")
    low_trace = _trace(project, 20)
    _members(project, low, [low_trace])
    _attribute(low_trace, "", 0.3, method="learned", status=Attribution.Status.INCONCLUSIVE, confident=False,
               candidates=[{"agent": "planner", "share": 0.3, "evidence": []},
                           {"agent": "writer", "share": 0.25, "evidence": []}])
    bare = _insight(project, title="Not attributed")
    tickets = [_ticket(project, attributed, "fp-1"), _ticket(project, low, "fp-2"), _ticket(project, bare, "fp-3")]
    _ticket(outsider_project, Insight.objects.get(project=outsider_project), "fp-theirs")
    client = client_for(owner)
    html = client.get(f"/p/{project.slug}/tickets/").content.decode()
    rows = _rows(html)
    assert rows == {str(tickets[0].pk): "orders_worker 2 of 2 confident",
                    str(tickets[1].pk): "no confident answer candidates planner, writer",
                    str(tickets[2].pk): "—"}
    assert "intruder" not in html
    assert f'href="/p/{project.slug}/insights/{attributed.pk}/#attribution"' in html
    # The page's queries do not grow with its tickets.
    with django_assert_max_num_queries(40) as few:
        client.get(f"/p/{project.slug}/tickets/")
    for i in range(5):
        more = _insight(project, title=f"more {i}")
        traces = [_trace(project, 30 + i * 3 + j) for j in range(3)]
        _members(project, more, traces)
        for trace in traces:
            _attribute(trace, "writer", 0.5)
        _ticket(project, more, f"fp-more-{i}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert len(_rows(client.get(f"/p/{project.slug}/tickets/").content.decode())) == 8
