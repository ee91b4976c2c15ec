"""Tickets from the example agent's insights: one per insight, no duplicates when the diagnosis runs again, the
status kept in step with the insight both ways, and a body that reproduces the failure."""

import pytest
from django.core.management import call_command

from diagnosis.models import Insight, InsightEvent
from diagnosis.services.insights_review import insight_merge, insight_reject, insight_status_set
from diagnosis.tickets.body import md_escape
from diagnosis.tickets.models import Ticket
from diagnosis.tickets.services import ticket_status_set, ticket_sync_for_insights
from tests.diagnosis.insights.conftest import BUG_NODE, TOUCHED_BY, diagnose, insight_for_tasks
from tests.tickets.conftest import ticket_of, ticketable, tracked

pytestmark = pytest.mark.django_db


def test_the_build_makes_one_ticket_per_insight_with_what_reproduces_it(project, desk_run):
    insights = ticketable(project)
    tickets = Ticket.objects.filter(project=project)
    assert len(insights) >= 3 and tickets.count() == len(insights)
    assert sorted(tickets.values_list("insight_id", flat=True)) == [i.pk for i in insights]
    assert not tickets.filter(insight__is_other=True).exists()
    for insight in insights:
        ticket = ticket_of(insight)
        assert ticket.fingerprint == insight.fingerprint and ticket.status == "open"
        assert ticket.body.startswith(f"<!-- clear-fingerprint: {insight.fingerprint} -->\n")
        assert ticket.frequency == insight.frequency and ticket.lift == insight.lift
        assert ticket.node == insight.node and ticket.level == insight.level

    for bug, tasks in TOUCHED_BY.items():
        insight = tracked(insight_for_tasks(project, BUG_NODE[bug], tasks, desk_run))
        ticket = ticket_of(insight)
        assert {t["task_id"] for t in ticket.traces} == tasks and ticket.trace_total == len(tasks)
        assert {t["release"] for t in ticket.traces} == {"r1"} and ticket.evidence
        body = ticket.body
        for section in ("## What happens", "## Evidence", "## Reproduce", "## Suggested fix"):
            assert section in body
        node = BUG_NODE[bug].replace("_", "\\_")
        assert (f"**Node:** {node}" if insight.level == "node" else "**Affected nodes:** ") in body
        assert f"{node} (" in body.split("**Affected nodes:** ")[1].split("\n")[0]
        assert f"{100 * insight.frequency:.1f}% of judged traces" in body and f"{insight.lift:.2f}×" in body
        assert f"**Counts:** {insight.count} statements · {insight.trace_count} traces of 22 judged" in body
        assert f"(http://127.0.0.1:8000/p/{project.slug}/insights/{insight.pk}/)" not in body  # bare, not a link
        assert f"**Insight:** http://127.0.0.1:8000/p/{project.slug}/insights/{insight.pk}/" in body
        assert body.count(f"](http://127.0.0.1:8000/p/{project.slug}/traces/") >= 4  # 3 evidence spans + the fix
        for trace in ticket.traces:
            assert f"| {trace['trace_id']} | {md_escape(trace['task_id'])} | r1 |" in body
        # Offline, the fix names what fired and where, instead of restating the statements.
        assert ticket.suggested_fix["source"] in ("rubric", "rule") and ticket.suggested_fix["span_id"]
        assert md_escape(ticket.suggested_fix["text"]) in body and "Fix the behaviour" not in body
        assert f"**Likely root cause:** {md_escape(insight.root_cause)}" in body
        for item in ticket.evidence:
            assert item["trace_id"] in {t["trace_id"] for t in ticket.traces}


def test_running_the_diagnosis_again_makes_no_duplicate_ticket(project, desk_run):
    before = dict(Ticket.objects.filter(project=project).values_list("fingerprint", "pk"))
    bodies = dict(Ticket.objects.filter(project=project).values_list("pk", "body"))
    second = diagnose(project, "r1")
    assert second.insights_summary["new"] == 0
    assert dict(Ticket.objects.filter(project=project).values_list("fingerprint", "pk")) == before
    summary = ticket_sync_for_insights(project=project)
    assert summary.created == [] and len(summary.unchanged) + len(summary.updated) == len(before)
    call_command("sync_tickets", project=project.name)
    assert Ticket.objects.filter(project=project).count() == len(before)
    # The traces of both runs are the same traces: the reproduction list does not grow.
    for ticket in Ticket.objects.filter(project=project):
        assert ticket.trace_total == len(ticket.traces) and ticket.body.count("| r1 |") == len(ticket.traces)
    assert set(bodies) == set(Ticket.objects.filter(project=project).values_list("pk", flat=True))


def test_a_ticket_fixed_fixes_its_insight_and_a_recurrence_reopens_both(project, desk_run):
    insight = tracked(insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], desk_run))
    ticket = ticket_of(insight)

    ticket = ticket_status_set(project=project, ticket=ticket, status="in_progress")
    insight.refresh_from_db()
    assert insight.status == "acknowledged" and ticket.status == "in_progress"
    ticket = ticket_status_set(project=project, ticket=ticket, status="fixed", note="routing fixed")
    insight.refresh_from_db()
    assert insight.status == "fixed" and ticket.status == "fixed" and "status: fixed" in ticket.body
    event = InsightEvent.objects.filter(insight=insight, kind="status").latest("pk")
    assert event.data == {"previous": "acknowledged", "status": "fixed", "note": "routing fixed"}

    # The fault is still in the code: the next run finds the pattern again, the insight reopens, so does the ticket.
    diagnose(project, "r1")
    insight.refresh_from_db()
    ticket.refresh_from_db()
    assert insight.status == "open" and insight.reopen_count == 1
    assert ticket.status == "open" and ticket.reopen_count == 1
    assert Ticket.objects.filter(project=project, fingerprint=ticket.fingerprint).count() == 1

    # A person's decision on the insight reaches the ticket too.
    insight_status_set(project=project, insight=insight, status="ignored")
    ticket.refresh_from_db()
    assert ticket.status == "wont_fix"
    insight_status_set(project=project, insight=insight, status="open")
    ticket.refresh_from_db()
    assert ticket.status == "open" and ticket.reopen_count == 2

    ticket = ticket_status_set(project=project, ticket=ticket, status="wont_fix")
    insight.refresh_from_db()
    assert insight.status == "ignored"


def test_rejected_and_merged_insights(project, desk_run):
    billing = list(Insight.objects.filter(project=project, level="node", node="billing_worker", is_other=False)
                   .order_by("pk"))
    rejected = tracked(insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], desk_run))
    insight_reject(project=project, insight=rejected)
    Ticket.objects.filter(insight=rejected).delete()
    ticket_sync_for_insights(project=project)
    assert not Ticket.objects.filter(project=project, insight=rejected).exists()
    if len(billing) >= 2:
        source, target = billing[0], billing[1]
        insight_merge(project=project, source=source, target=target)
        ticket_sync_for_insights(project=project)
        closed = ticket_of(source)
        assert closed.status == "wont_fix" and closed.merged_into_id == ticket_of(target).pk
        assert f"Merged into ticket {ticket_of(target).pk}" in closed.body


def test_sync_is_scoped_to_the_project(project, outsider_project, desk_run):
    from diagnosis.tickets.errors import TicketInvalidError

    with pytest.raises(TicketInvalidError):
        ticket_sync_for_insights(project=outsider_project, insights=list(ticketable(project))[:1])
    assert not Ticket.objects.filter(project=outsider_project).exists()
