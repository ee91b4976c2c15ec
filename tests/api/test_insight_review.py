"""Reviewing insights over the API: confirm, reject, status, merge and split call diagnosis/services/
insights_review.py, and what people decided survives the next run."""

import pytest
from rest_framework.test import APIClient

from diagnosis.models import Insight, InsightEvent
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


@pytest.fixture
def built(project, desk_rubrics):  # noqa: F811
    support_desk_ingest(project=project, bugs="all", release="r1")
    return diagnose(project, "r1")


def _node_insight(client, node: str) -> dict:
    """The node's most frequent insight."""
    rows = client.get(f"/api/v1/insights/?level=node&node={node}").json()["results"]
    return max((r for r in rows if not r["is_other"]), key=lambda r: (r["trace_count"], r["count"], -r["id"]))


def test_confirm_reject_and_status(client, project, built):
    planner, mediator = _node_insight(client, "planner"), _node_insight(client, "mediator")
    response = client.post(f"/api/v1/insights/{planner['id']}/confirm/", {"note": "seen it"}, format="json")
    assert response.status_code == 200 and response.json()["review"] == "confirmed"
    event = InsightEvent.objects.filter(insight_id=planner["id"], kind="confirmed").get()
    assert event.data["note"] == "seen it" and event.user is None

    response = client.post(f"/api/v1/insights/{mediator['id']}/reject/", {}, format="json")
    assert response.status_code == 200 and response.json()["review"] == "rejected"
    assert mediator["id"] not in {r["id"] for r in client.get("/api/v1/insights/").json()["results"]}

    response = client.post(f"/api/v1/insights/{planner['id']}/status/", {"status": "fixed"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "fixed"
    response = client.post(f"/api/v1/insights/{planner['id']}/status/", {"status": "done"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"

    # The next run finds both patterns again: the fixed one is reopened, the rejected one stays rejected.
    support_desk_ingest(project=project, bugs="all", release="r2")
    diagnose(project, "r2")
    assert Insight.objects.get(pk=planner["id"]).status == "open"
    assert Insight.objects.get(pk=planner["id"]).review == "confirmed"
    assert Insight.objects.get(pk=mediator["id"]).review == "rejected"


def test_split_then_merge_back(client, built):
    mediator = _node_insight(client, "mediator")
    statements = client.get(f"/api/v1/insights/{mediator['id']}/statements/?page_size=500").json()["results"]
    assert len(statements) >= 2 and all(s["node"] == "mediator" for s in statements)
    moved = [s["id"] for s in statements[:1]]
    response = client.post(f"/api/v1/insights/{mediator['id']}/split/",
                           {"statement_ids": moved, "title": "the first of them"}, format="json")
    assert response.status_code == 201, response.content
    new = response.json()
    assert (new["title"], new["level"], new["node"]) == ("the first of them", "node", "mediator")
    held = client.get(f"/api/v1/insights/{new['id']}/statements/").json()["results"]
    assert [s["id"] for s in held] == moved
    left = client.get(f"/api/v1/insights/{mediator['id']}/statements/?page_size=500").json()["results"]
    assert len(left) == len(statements) - 1

    response = client.post(f"/api/v1/insights/{new['id']}/merge/", {"into": mediator["id"]}, format="json")
    assert response.status_code == 200 and response.json()["id"] == mediator["id"]
    assert Insight.objects.get(pk=new["id"]).merged_into_id == mediator["id"]
    again = client.get(f"/api/v1/insights/{mediator['id']}/statements/?page_size=500").json()["results"]
    assert sorted(s["id"] for s in again) == sorted(s["id"] for s in statements)


def test_review_errors_say_what_is_wrong(client, built):
    planner, mediator = _node_insight(client, "planner"), _node_insight(client, "mediator")
    response = client.post(f"/api/v1/insights/{planner['id']}/merge/", {"into": mediator["id"]}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "insight_merge_invalid"
    assert "one level and node" in response.json()["message"]
    response = client.post(f"/api/v1/insights/{planner['id']}/merge/", {"into": planner["id"]}, format="json")
    assert response.status_code == 400 and "itself" in response.json()["message"]
    response = client.post(f"/api/v1/insights/{planner['id']}/split/", {"statement_ids": []}, format="json")
    assert response.status_code == 400 and "statement_ids" in response.json()["extra"]["fields"]
    mediator_statement = client.get(f"/api/v1/insights/{mediator['id']}/statements/").json()["results"][0]["id"]
    response = client.post(f"/api/v1/insights/{planner['id']}/split/", {"statement_ids": [mediator_statement]},
                           format="json")
    assert response.status_code == 404 and response.json()["extra"]["missing"] == [mediator_statement]
    response = client.post("/api/v1/insights/999999999/confirm/", {}, format="json")
    assert response.status_code == 404
