"""Issue 42, item 5: on the demo (the example agent as scripts/demo.sh sends it: release v1 with the three planted
bugs, seed 0, and v2 with misroute fixed, seed 1; judged as `diagnose` judges it there, by the default judges and the
demo's rubrics, no model; insights built, then the shipped learned attribution), "Where it went wrong" for each bug's
insights blames the agent whose decision the bug is, with confidence: mediator_race on mediator, misroute on planner
(the routing decision; orders_worker only carried it out) and retry_loop on billing_worker, on the insight page and in
the ticket. The spans go through the ingestion service in-process (tests/diagnosis/support.py)."""

from __future__ import annotations

import pytest

from diagnosis.attribution.models import Attribution
from diagnosis.attribution.selectors import attribution_summary_for_insight
from diagnosis.attribution.services import attribution_compute_for_project
from diagnosis.models import Insight
from diagnosis.tickets.body import body_render, md_escape
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import demo_diagnose, tasks_of
from tests.diagnosis.test_support_desk_diagnosis import TOUCHED_BY

pytestmark = pytest.mark.django_db

BLAMED = {"mediator_race": "mediator", "misroute": "planner", "retry_loop": "billing_worker"}


def test_the_demo_blames_each_bug_on_the_agent_that_made_it(project, settings):
    run = demo_diagnose(project, settings)
    attribution_compute_for_project(project=project, method="learned", recompute=True)
    insights = [i for i in Insight.objects.filter(project=project, is_other=False, occurrences__run=run).distinct()]
    for bug, agent in BLAMED.items():
        # The insights whose traces are the bug's (an insight may hold a subset: one rubric's findings).
        found = [i for i in insights if tasks_of(i, run) and tasks_of(i, run) <= TOUCHED_BY[bug]]
        assert found, (bug, {i.title: sorted(tasks_of(i, run)) for i in insights})
        for insight in found:
            summary = attribution_summary_for_insight(project=project, insight=insight)
            assert summary["confident"] and summary["blamed"] == agent, (bug, insight.title, summary)
            # Most of its traces name that agent with confidence, and no trace names another with confidence.
            assert [a["agent"] for a in summary["agents"]] == [agent], summary
            assert summary["agents"][0]["count"] * 2 > summary["attributed"], summary
            ticket = Ticket.objects.filter(project=project, insight=insight).first()
            if ticket is not None:  # its ticket says the same
                assert f"**Blamed:** {md_escape(agent)} (" in body_render(ticket=ticket)
    # Every learned attribution carries a confidence; an unconfident one names no agent but has candidates.
    for attribution in Attribution.objects.filter(project=project, method="learned"):
        assert attribution.confidence is not None and "confident" in attribution.details
        if not attribution.details["confident"]:
            assert attribution.status == "inconclusive" and not attribution.agent
            assert attribution.details["candidates"]
