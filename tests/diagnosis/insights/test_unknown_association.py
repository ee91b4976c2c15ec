"""Issue 28, item 4: with fewer than 10 succeeding traces the failure association is unknown, not absent.

A set of failed runs only used to give every insight lift 1, "not associated with failure", and no ticket. Now such
insights have no lift ("association unknown"), are listed and ranked as those associated with failure (by frequency),
reach the overview's Top insights and get tickets.
"""

from __future__ import annotations

import pytest

from diagnosis.clustering import TraceInfo, issue_stats
from diagnosis.models import Insight
from diagnosis.selectors import insight_list_top
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import diagnose
from tests.frontend.conftest import client_for
from tests.tickets.conftest import ticketable
from traces.services.imports import traces_import

pytestmark = pytest.mark.django_db


def _traces(failed: int, succeeded: int) -> dict[str, TraceInfo]:
    return {**{f"f{i}": TraceInfo(failed=True) for i in range(failed)},
            **{f"s{i}": TraceInfo(failed=False) for i in range(succeeded)}}


def test_fewer_than_ten_successes_give_no_lift():
    traces = _traces(30, 0)
    half = [f"f{i}" for i in range(15)]
    assert issue_stats(half, traces).lift is None  # was 1.0, "not associated"
    traces = _traces(30, 9)
    assert issue_stats(half + ["s0"], traces).lift is None
    traces = _traces(30, 10)
    stats = issue_stats(half + ["s0"], traces)
    assert stats.lift is not None and stats.lift_ci[0] > 1
    insight = Insight(lift=None, lift_low=None, lift_high=None)
    assert insight.failure_association == "unknown"


def test_failed_runs_only_give_insights_of_unknown_association_with_tickets(project, owner, shared_dir, settings):
    settings.CLEAR_JUDGE_MODEL = ""  # rules only, no model
    folder = shared_dir / "datasets" / "whowhen-algorithm-generated"
    assert traces_import(project=project, path=folder, outcome="failure").requests_accepted == 126
    diagnose(project, "")

    insights = list(Insight.objects.filter(project=project, is_other=False))
    assert insights, "rules found nothing on Who&When"
    for insight in insights:
        assert insight.lift is None and insight.failure_association == "unknown", (insight.title, insight.lift)
        assert insight.trace_count > 0 and insight.frequency > 0

    # They still get tickets: one per problem (a node insight inside a system insight is tracked there).
    wanted = ticketable(project)
    assert wanted
    tickets = Ticket.objects.filter(project=project)
    assert {t.insight_id for t in tickets} >= {i.pk for i in wanted}
    assert all(t.failure_association == "unknown" for t in tickets)
    ticket = tickets.first()
    assert "association unknown" in ticket.body and "Not associated with failure" not in ticket.body

    # Listed, ranked by frequency, on the overview's Top insights; the pages say the association is unknown.
    top = insight_list_top(project=project)
    assert top and [i.frequency for i in top] == sorted((i.frequency for i in top), reverse=True)
    html = client_for(owner).get(f"/p/{project.slug}/insights/").content.decode()
    assert "association unknown" in html and "not associated with failure" not in html
    page = client_for(owner).get(f"/p/{project.slug}/insights/{top[0].pk}/").content.decode()
    assert 'data-association="unknown"' in page
