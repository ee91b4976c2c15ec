"""Issue 42, item 2: an attribution under its threshold is "no confident answer": the insight page, the ticket body
and the API show its top candidates with the evidence for each, and never a single blamed agent. A confident one
names the agent and step and what it weighed."""

from __future__ import annotations

import re
from html import unescape

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.attribution.models import Attribution
from diagnosis.tickets.body import body_render
from diagnosis.tickets.models import Ticket
from tests.attribution.test_attribution_pages import SPAN, _insight, _members, _section, _trace
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

CANDIDATES = [{"agent": "planner", "step": 0, "span_id": SPAN, "share": 0.41,
               "evidence": ["it handed its output to another agent", "rule.regex failed it"]},
              {"agent": "orders_worker", "step": 3, "span_id": SPAN, "share": 0.35,
               "evidence": ["it issued a tool call that failed"]},
              {"agent": "writer", "step": 5, "span_id": SPAN, "share": 0.1, "evidence": []}]


def _unconfident(trace) -> Attribution:
    return Attribution.objects.create(
        project=trace.project, trace=trace, method="learned", status=Attribution.Status.INCONCLUSIVE, agent="",
        span_id="", step_index=None, confidence=0.41, reason="no confident answer (0.41 < 0.50)",
        details={"confident": False, "low_confidence": True, "candidates": CANDIDATES,
                 "top": {"agent": "planner", "step": 0, "span_id": SPAN}})


@pytest.fixture
def unsure(project):
    insight = _insight(project, title="Refunds answered from the order records", node="orders_worker")
    traces = [_trace(project, 1), _trace(project, 2)]
    _members(project, insight, traces)
    for trace in traces:
        _unconfident(trace)
    return insight


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))


def test_the_insight_page_shows_candidates_and_no_single_blame(project, owner, unsure):
    section = _section(client_for(owner).get(f"/p/{project.slug}/insights/{unsure.pk}/").content.decode(),
                       "insight-attribution")
    text = _text(section)
    assert 'data-testid="attribution-unconfident"' in section and "No confident answer" in text
    assert 'data-testid="attribution-blamed"' not in section and 'data-testid="attribution-agent"' not in section
    candidates = re.findall(r'data-testid="attribution-candidate" data-agent="([^"]+)"', section)
    assert candidates == ["planner", "orders_worker", "writer"]
    assert "it handed its output to another agent" in text and "it issued a tool call that failed" in text
    assert section.count('data-testid="attribution-row-unconfident"') == 2  # each trace's row, with its candidates


def test_the_api_says_confident_false_and_lists_candidates(project, owner, unsure):
    key = api_key_create(project=project, name="attribution", created_by=owner)
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    body = client.get(f"/api/v1/insights/{unsure.pk}/attribution/").json()
    assert (body["confident"], body["blamed"], body["agents"]) == (False, None, [])
    assert (body["attributed"], body["confident_count"], body["unconfident_count"]) == (2, 0, 2)
    assert [c["agent"] for c in body["candidates"]] == ["planner", "orders_worker", "writer"]
    assert body["candidates"][0]["first"] == 2 and "rule.regex failed it" in body["candidates"][0]["evidence"]
    for row in body["traces"]:
        assert row["confident"] is False and row["agent"] == "" and row["step_index"] is None
        assert [c["agent"] for c in row["candidates"]] == ["planner", "orders_worker", "writer"]
    assert client.get("/api/v1/insights/999999/attribution/").status_code == 404


def test_the_ticket_body_lists_candidates_instead_of_a_blamed_agent(project, unsure):
    ticket = Ticket.objects.create(project=project, insight=unsure, fingerprint="fp-unsure", title=unsure.title,
                                   level=unsure.level, node=unsure.node, severity="high", frequency=0.5)
    body = body_render(ticket=ticket)
    section = body[body.index("## Where it went wrong"):body.index("## Suggested fix")]
    assert "**No confident answer** in 2 of 2 attributed failing traces" in section
    assert "- planner: top candidate in 2" in section and "Blamed" not in section


def test_a_confident_answer_blames_one_agent_everywhere(project, owner, unsure):
    Attribution.objects.filter(project=project).update(
        status=Attribution.Status.OK, agent="planner", span_id=SPAN, step_index=0, confidence=0.8,
        details={"confident": True, "candidates": CANDIDATES, "evidence": ["rule.regex failed it"]})
    key = api_key_create(project=project, name="attribution", created_by=owner)
    body = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}").get(
        f"/api/v1/insights/{unsure.pk}/attribution/").json()
    assert (body["confident"], body["blamed"]) == (True, "planner")
    assert body["traces"][0]["evidence"] == ["rule.regex failed it"] and body["traces"][0]["candidates"] == []
    ticket = Ticket.objects.create(project=project, insight=unsure, fingerprint="fp-sure", title=unsure.title,
                                   level=unsure.level, node=unsure.node, severity="high", frequency=0.5)
    assert "**Blamed:** planner (2 of 2 confident answers" in body_render(ticket=ticket)
