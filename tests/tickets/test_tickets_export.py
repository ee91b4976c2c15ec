"""The bug list as Markdown, CSV and JSON: every open ticket with its evidence; trace content stays inert."""

import csv
import io
import json

import pytest
from django.core.management import call_command

from diagnosis.models import InsightEvidence
from diagnosis.tickets.export import _cell, tickets_export
from diagnosis.tickets.models import Ticket
from diagnosis.tickets.services import ticket_status_set, ticket_sync_for_insights
from tests.diagnosis.insights.conftest import TOUCHED_BY, insight_for_tasks
from tests.tickets.conftest import ticket_of, tracked

pytestmark = pytest.mark.django_db

SCRIPT = '<script>alert("pwned")</script> [click](javascript:alert(1)) ![x](http://evil/x.png) | # *boom*'


@pytest.fixture
def desk_tickets(project, desk_run):
    """The desk's tickets, one of them closed (wont_fix), one citing a hostile quote."""
    hostile = tracked(insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], desk_run))
    InsightEvidence.objects.filter(insight=hostile).update(quote=SCRIPT)
    ticket_sync_for_insights(project=project)
    closed = Ticket.objects.filter(project=project).exclude(insight=hostile).order_by("pk").first()
    ticket_status_set(project=project, ticket=closed, status="wont_fix")
    return ticket_of(hostile), closed


def test_the_body_escapes_a_hostile_quote(desk_tickets):
    hostile, _ = desk_tickets
    assert "<script" not in hostile.body and "</script>" not in hostile.body
    assert "&lt;script&gt;alert(\"pwned\")&lt;/script&gt;" in hostile.body
    assert "\\[click\\](javascript:alert(1))" in hostile.body and "!\\[x\\](http://evil/x.png)" in hostile.body
    assert "\\| \\# \\*boom\\*" in hostile.body
    assert hostile.body.count("> &lt;script&gt;") == len(hostile.evidence)
    # The only raw HTML is Clear's own: the fingerprint comment and the footer.
    tags = {line for line in hostile.body.splitlines() if "<" in line}
    assert all(line.startswith(("<!-- clear-fingerprint:", "<sub>Made by Clear")) for line in tags), tags


def test_markdown_holds_every_open_ticket_with_its_evidence(project, desk_tickets):
    hostile, closed = desk_tickets
    text = tickets_export(project=project, output="md")
    open_tickets = Ticket.objects.filter(project=project, status__in=["open", "in_progress"])
    assert text.startswith(f"# Bug list: {project.name.replace('#', '')}")
    assert f"{open_tickets.count()} tickets (open)" in text
    for ticket in open_tickets:
        assert f"# Ticket {ticket.pk}: " in text and ticket.fingerprint in text
        for item in ticket.evidence:
            assert item["trace_id"] in text
    assert f"# Ticket {closed.pk}: " not in text
    assert "<script" not in text and "&lt;script&gt;" in text
    assert f"# Ticket {closed.pk}: " in tickets_export(project=project, output="md", status="all")


def test_csv_holds_every_open_ticket_with_its_evidence(project, desk_tickets):
    hostile, closed = desk_tickets
    rows = list(csv.DictReader(io.StringIO(tickets_export(project=project, output="csv"))))
    open_tickets = {t.pk: t for t in Ticket.objects.filter(project=project, status__in=["open", "in_progress"])}
    assert sorted(int(r["id"]) for r in rows) == sorted(open_tickets)
    for row in rows:
        ticket = open_tickets[int(row["id"])]
        assert row["fingerprint"] == ticket.fingerprint and row["status"] == "open"
        assert row["trace_ids"].split() == [t["trace_id"] for t in ticket.traces]
        assert set(row["task_ids"].split()) == {t["task_id"] for t in ticket.traces}
        evidence = json.loads(row["evidence"])
        assert [(e["trace_id"], e["span_id"], e["quote"]) for e in evidence] == \
               [(e["trace_id"], e["span_id"], e["quote"]) for e in ticket.evidence] != []
        assert row["frequency"] == f"{100 * ticket.frequency:.1f}%"
    (row,) = [r for r in rows if int(r["id"]) == hostile.pk]
    assert set(row["task_ids"].split()) == TOUCHED_BY["misroute"]
    assert all(e["quote"] == SCRIPT for e in json.loads(row["evidence"]))  # data, for the reader to escape
    assert str(closed.pk) not in {r["id"] for r in rows}


def test_json_holds_every_open_ticket_with_its_evidence(project, desk_tickets):
    hostile, closed = desk_tickets
    data = json.loads(tickets_export(project=project, output="json"))
    open_tickets = {t.pk: t for t in Ticket.objects.filter(project=project, status__in=["open", "in_progress"])}
    assert data["project"] == project.name and data["status"] == "open" and data["count"] == len(open_tickets)
    assert {t["id"] for t in data["tickets"]} == set(open_tickets)
    for item in data["tickets"]:
        ticket = open_tickets[item["id"]]
        assert item["evidence"] == ticket.evidence and item["traces"] == ticket.traces and item["evidence"]
        assert item["body"] == ticket.body and item["insight_id"] == ticket.insight_id
    everything = json.loads(tickets_export(project=project, output="json", status="all"))
    assert closed.pk in {t["id"] for t in everything["tickets"]}
    only_closed = json.loads(tickets_export(project=project, output="json", status="wont_fix"))
    assert [t["id"] for t in only_closed["tickets"]] == [closed.pk]


def test_the_export_command_writes_each_format(project, desk_tickets, tmp_path):
    for output in ("md", "csv", "json"):
        path = tmp_path / f"bugs.{output}"
        call_command("export_tickets", project=project.name, output=output, status="all", file=str(path))
        assert path.read_text() .strip() != ""
    assert len(json.loads((tmp_path / "bugs.json").read_text())["tickets"]) == Ticket.objects.filter(
        project=project).count()
    out = io.StringIO()
    call_command("export_tickets", project=project.name, output="csv", stdout=out)
    assert out.getvalue().startswith("id,fingerprint,status,title")


def test_each_format_links_every_ticket_to_its_insight_with_percentages_and_description(project, desk_tickets,
                                                                                        settings):
    settings.CLEAR_PUBLIC_URL = "https://clear.example.com/"  # a trailing slash is not doubled
    ticket_sync_for_insights(project=project)  # bodies carry the links too
    tickets = list(Ticket.objects.filter(project=project, status__in=["open", "in_progress"]))
    base = f"https://clear.example.com/p/{project.slug}"
    markdown = tickets_export(project=project, output="md")
    rows = {int(r["id"]): r for r in csv.DictReader(io.StringIO(tickets_export(project=project, output="csv")))}
    records = {t["id"]: t for t in json.loads(tickets_export(project=project, output="json"))["tickets"]}
    for ticket in tickets:
        url = f"{base}/insights/{ticket.insight_id}/"
        percent = f"{100 * ticket.frequency:.1f}%"
        assert f"]({url})" in markdown and f"| {percent} |" in markdown
        assert f"**Insight:** {url}" in ticket.body and f"**Frequency:** {percent} of judged traces" in ticket.body
        row, record = rows[ticket.pk], records[ticket.pk]
        assert row["url"] == record["url"] == url
        assert row["frequency"] == record["frequency_percent"] == percent
        assert record["frequency"] == round(ticket.frequency, 4) and len(str(record["frequency"])) <= 6
        assert row["description"] == record["description"] == ticket.description != ""
        assert ticket.description.replace("_", "\\_")[:40] in markdown
        assert row["statement_count"] == str(record["statement_count"]) == str(ticket.statement_count)
        assert int(row["judged_count"]) == record["judged_count"] == 22
        spans = record["evidence_urls"]
        assert len(spans) == 3 and all(u.startswith(f"{base}/traces/") and "?span=" in u for u in spans)
        assert row["evidence_urls"].split() == spans
        assert all(f"]({u})" in ticket.body for u in spans)
        assert record["suggested_fix"] and not record["suggested_fix"].startswith("Fix the behaviour")
    assert "0.27272" not in markdown + json.dumps(records) + "".join(r["frequency"] for r in rows.values())


def test_csv_cells_that_would_run_as_formulas_are_quoted():
    assert _cell("=HYPERLINK(\"http://evil\")") == "'=HYPERLINK(\"http://evil\")"
    assert _cell("@SUM(A1)") == "'@SUM(A1)" and _cell("-0.5") == "-0.5" and _cell("plain") == "plain"
