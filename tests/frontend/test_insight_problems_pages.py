"""One row per problem on the pages (issue 39 item 1): Insights, the overview's Top insights and Tickets show the
misroute once, its system insight's row holding its two node insights; `?level=node` still lists them flat."""

from __future__ import annotations

import re

import pytest

from diagnosis.models import Insight, InsightLink
from diagnosis.services.insights import insights_build
from diagnosis.tickets.models import Ticket
from tests.frontend.conftest import Seeded, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def insighted(seeded) -> Seeded:
    assert insights_build(run=seeded.run) is not None
    return seeded


def _ids(pattern: str, html: str) -> list[int]:
    return [int(pk) for pk in re.findall(pattern, html)]


def _misroute(project) -> tuple[Insight, set[int]]:
    (system,) = Insight.objects.filter(project=project, level="system", is_other=False)
    nodes = set(InsightLink.objects.filter(system=system).values_list("node_id", flat=True))
    assert len(nodes) == 2  # planner's and orders_worker's
    return system, nodes


def test_insights_lists_the_misroute_once_with_its_node_insights_nested(insighted, owner):
    project, client = insighted.project, client_for(owner)
    system, nodes = _misroute(project)
    html = client.get(f"/p/{project.slug}/insights/").content.decode()
    rows = _ids(r'<tr data-insight="(\d+)"', html)
    assert system.pk in rows and not nodes & set(rows), rows
    assert len(rows) == len(set(rows)) == Insight.objects.filter(project=project, is_other=False).count() - 2
    assert set(_ids(r'data-nested-insight="(\d+)"', html)) == nodes
    for pk in nodes:  # each keeps its own page, linked from the row
        assert f'/p/{project.slug}/insights/{pk}/" data-testid="nested-insight-link"' in html
    flat = client.get(f"/p/{project.slug}/insights/?level=node").content.decode()
    assert nodes <= set(_ids(r'<tr data-insight="(\d+)"', flat)) and 'data-nested-insight' not in flat


def test_top_insights_and_tickets_show_one_row_per_problem(insighted, owner):
    project, client = insighted.project, client_for(owner)
    system, nodes = _misroute(project)
    overview = client.get(f"/p/{project.slug}/").content.decode()
    top = overview.split('data-testid="top-insights"', 1)[1].split("</section>", 1)[0]
    linked = _ids(r'/insights/(\d+)/"', top)
    assert system.pk in linked and nodes <= set(linked)
    assert top.count('data-testid="nested-insight-link"') == 2 and top.count("<tr data-level=") == len(
        set(linked) - nodes)

    # A node ticket made before its insight joined the system insight points to the system ticket: not a row.
    ticket = Ticket.objects.get(project=project, insight=system)
    Ticket.objects.create(project=project, insight_id=min(nodes), title="planner's own", level="node",
                          status=Ticket.Status.WONT_FIX, merged_into=ticket)
    for status in ("open", "all"):
        html = client.get(f"/p/{project.slug}/tickets/?status={status}").content.decode()
        rows = _ids(r'<tr id="ticket-\d+" data-ticket="(\d+)"', html)
        assert ticket.pk in rows and len(rows) == len(set(rows)) == Ticket.objects.filter(
            project=project, merged_into__isnull=True).count(), (status, rows)
        assert html.count('data-testid="nested-insight-link"') == 2
    assert "planner&#x27;s own" in client.get(f"/p/{project.slug}/tickets/?status=wont_fix").content.decode()
