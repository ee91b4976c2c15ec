"""Issue 42, item 2: the insight detail API (GET /api/v1/insights/<id>/) carries the insight's attribution beside its
figures, as the insight page and the ticket show it: `confident`, the blamed agent and its step only when confident,
else no agent and the candidates with the evidence for each. A page of insights leaves it out (its query count does
not grow with the page), and the detail reads it in a fixed number of queries whatever the number of traces."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.attribution.models import Attribution
from tests.attribution.test_attribution_pages import SPAN, _insight, _members, _trace
from tests.attribution.test_unconfident import CANDIDATES, unsure  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(project, owner):
    key = api_key_create(project=project, name="insight detail", created_by=owner)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def test_an_unconfident_insight_names_no_agent_and_lists_candidates_with_evidence(client, unsure):  # noqa: F811
    attribution = client.get(f"/api/v1/insights/{unsure.pk}/").json()["attribution"]
    assert (attribution["confident"], attribution["blamed"], attribution["step"]) == (False, None, None)
    assert (attribution["failing"], attribution["attributed"], attribution["confident_count"],
            attribution["unconfident_count"]) == (2, 2, 0, 2)
    assert [c["agent"] for c in attribution["candidates"]] == ["planner", "orders_worker", "writer"]
    planner = attribution["candidates"][0]
    assert (planner["traces"], planner["first"]) == (2, 2)
    assert "rule.regex failed it" in planner["evidence"] and "it handed its output to another agent" in planner[
        "evidence"]


def test_a_confident_insight_names_the_agent_its_step_and_the_evidence(project, client, unsure):  # noqa: F811
    traces = list(Attribution.objects.filter(project=project).order_by("trace__trace_id"))
    for attribution, confidence in zip(traces, (0.6, 0.8)):
        Attribution.objects.filter(pk=attribution.pk).update(
            status=Attribution.Status.OK, agent="planner", span_id=SPAN, step_index=0, confidence=confidence,
            details={"confident": True, "candidates": CANDIDATES, "evidence": ["rule.regex failed it"]})
    attribution = client.get(f"/api/v1/insights/{unsure.pk}/").json()["attribution"]
    assert (attribution["confident"], attribution["blamed"], attribution["candidates"]) == (True, "planner", [])
    # the blamed agent's most confident answer
    assert attribution["step"] == {"trace_id": traces[1].trace.trace_id, "step_index": 0, "span_id": SPAN,
                                   "confidence": 0.8, "evidence": ["rule.regex failed it"]}
    assert (attribution["confident_count"], attribution["unconfident_count"]) == (2, 0)


def test_the_blamed_step_is_the_blamed_agents_even_when_others_are_more_confident(project, client):
    """Most confident answers name orders_worker at a low confidence; writer's fewer ones are more confident: the
    step is orders_worker's, not the first row of the summary's top rows."""
    insight = _insight(project, title="Lookups answered wrongly")
    traces = [_trace(project, i) for i in range(1, 13)]
    _members(project, insight, traces)
    for i, trace in enumerate(traces):
        agent, confidence = ("orders_worker", 0.4 + i / 100) if i < 7 else ("writer", 0.95)
        Attribution.objects.create(project=project, trace=trace, method="learned", status=Attribution.Status.OK,
                                   agent=agent, span_id=SPAN, step_index=i, confidence=confidence,
                                   reason=f"{agent} went wrong", details={"confident": True, "evidence": [agent]})
    attribution = client.get(f"/api/v1/insights/{insight.pk}/").json()["attribution"]
    assert (attribution["confident"], attribution["blamed"]) == (True, "orders_worker")
    assert (attribution["step"]["step_index"], attribution["step"]["evidence"]) == (6, ["orders_worker"])


def test_no_attribution_yet_is_unconfident_with_no_candidates(project, client):
    insight = _insight(project, title="Not attributed")
    _members(project, insight, [_trace(project, 1)])
    attribution = client.get(f"/api/v1/insights/{insight.pk}/").json()["attribution"]
    assert attribution == {"confident": False, "blamed": None, "step": None, "candidates": [], "failing": 1,
                           "attributed": 0, "confident_count": 0, "unconfident_count": 0}


def test_another_projects_insight_is_a_404(client, outsider_project):
    theirs = _insight(outsider_project, title="Theirs")
    assert client.get(f"/api/v1/insights/{theirs.pk}/").status_code == 404


def test_the_list_leaves_it_out_and_the_detail_costs_a_fixed_number_of_queries(
        project, client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def detail_queries(insight) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/api/v1/insights/{insight.pk}/").status_code == 200
        return len(captured)

    small, large = _insight(project, title="small"), _insight(project, title="large")
    for insight, count, offset in ((small, 1, 100), (large, 8, 200)):
        traces = [_trace(project, offset + i) for i in range(count)]
        _members(project, insight, traces)
        for trace in traces:
            Attribution.objects.create(project=project, trace=trace, method="learned", status=Attribution.Status.OK,
                                       agent="planner", span_id=SPAN, step_index=0, confidence=0.7,
                                       details={"confident": True})
    detail_queries(small)  # the API key's first request records its last use (an UPDATE) once
    assert detail_queries(large) == detail_queries(small)
    page = client.get("/api/v1/insights/").json()["results"]
    assert page and all("attribution" not in row for row in page)
