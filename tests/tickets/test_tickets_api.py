"""/api/v1/tickets/: list with filters and cursor pages, detail, status, export; everything scoped to the key's
project (another project's ticket is a 404)."""

import csv
import io

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.models import Insight
from diagnosis.tickets.models import Ticket
from diagnosis.tickets.services import ticket_sync_for_insights

pytestmark = pytest.mark.django_db


def make_tickets(project, prefix: str, n: int = 3) -> list[Ticket]:
    insights = [Insight.objects.create(project=project, level="node" if i else "system", node="planner" if i else "",
                                       title=f"{prefix} problem {i}", fingerprint=f"{prefix}{i:038x}"[:40],
                                       severity="high" if i == 2 else "medium", frequency=0.1 * (i + 1))
                for i in range(n)]
    ticket_sync_for_insights(project=project, insights=insights)
    return list(Ticket.objects.filter(project=project).order_by("pk"))


@pytest.fixture
def theirs(outsider_project, outsider):
    tickets = make_tickets(outsider_project, "ff")
    key = api_key_create(project=outsider_project, name="theirs", created_by=outsider)
    return tickets, APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def test_the_list_holds_the_projects_tickets_in_pages_with_filters(project, api, theirs):
    mine = make_tickets(project, "aa")
    body = api.get("/api/v1/tickets/?page_size=2").json()
    assert [r["id"] for r in body["results"]] == [mine[2].pk, mine[1].pk] and body["previous"] is None
    rest = api.get(body["next"]).json()
    assert [r["id"] for r in rest["results"]] == [mine[0].pk] and rest["next"] is None
    row = rest["results"][0]
    assert row["fingerprint"] == mine[0].fingerprint and row["status"] == "open" and "body" not in row
    assert row["insight_id"] == mine[0].insight_id and row["external_number"] is None

    assert [r["id"] for r in api.get("/api/v1/tickets/?level=system").json()["results"]] == [mine[0].pk]
    assert [r["id"] for r in api.get("/api/v1/tickets/?severity=high").json()["results"]] == [mine[2].pk]
    assert len(api.get("/api/v1/tickets/?node=planner").json()["results"]) == 2
    query = f"/api/v1/tickets/?insight_id={mine[1].insight_id}"
    assert [r["id"] for r in api.get(query).json()["results"]] == [mine[1].pk]
    query = f"/api/v1/tickets/?insight_id={theirs[0][1].insight_id}"
    assert api.get(query).json()["results"] == []
    response = api.get("/api/v1/tickets/?status=done")
    assert response.status_code == 400 and response.json()["code"] == "invalid"


def test_detail_and_status_change(project, api, theirs):
    mine = make_tickets(project, "aa")
    body = api.get(f"/api/v1/tickets/{mine[1].pk}/").json()
    assert body["body"] == mine[1].body and body["evidence"] == [] and body["title"] == "[planner] aa problem 1"

    response = api.patch(f"/api/v1/tickets/{mine[1].pk}/", {"status": "fixed", "note": "deployed"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "fixed"
    assert Insight.objects.get(pk=mine[1].insight_id).status == "fixed"
    open_ids = [r["id"] for r in api.get("/api/v1/tickets/?status=open").json()["results"]]
    assert open_ids == [mine[2].pk, mine[0].pk]
    assert [r["id"] for r in api.get("/api/v1/tickets/?status=fixed").json()["results"]] == [mine[1].pk]
    response = api.patch(f"/api/v1/tickets/{mine[1].pk}/", {"status": "closed"}, format="json")
    assert response.status_code == 400


def test_another_projects_ticket_is_not_found(project, api, theirs):
    make_tickets(project, "aa")
    their_tickets, their_api = theirs
    target = their_tickets[0]
    assert {r["id"] for r in api.get("/api/v1/tickets/?status=all").json()["results"]}.isdisjoint(
        {t.pk for t in their_tickets})
    for response in (api.get(f"/api/v1/tickets/{target.pk}/"),
                     api.patch(f"/api/v1/tickets/{target.pk}/", {"status": "fixed"}, format="json")):
        assert response.status_code == 404 and set(response.json()) == {"message", "code", "extra"}
    target.refresh_from_db()
    assert target.status == "open" and Insight.objects.get(pk=target.insight_id).status == "open"
    assert their_api.get(f"/api/v1/tickets/{target.pk}/").status_code == 200
    assert api.get("/api/v1/tickets/99999999999999999999/").status_code == 404
    assert APIClient().get("/api/v1/tickets/").status_code == 401


def test_export_endpoint(project, api, theirs):
    mine = make_tickets(project, "aa")
    response = api.get("/api/v1/tickets/export/?output=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {int(r["id"]) for r in rows} == {t.pk for t in mine}
    response = api.get("/api/v1/tickets/export/?output=json&status=all")
    assert response["Content-Type"] == "application/json"
    assert {t["id"] for t in response.json()["tickets"]} == {t.pk for t in mine}
    text = api.get("/api/v1/tickets/export/").content.decode()
    assert text.startswith("# Bug list") and "ff problem" not in text and "aa problem 2" in text
    assert api.get("/api/v1/tickets/export/?output=xml").status_code == 400


def test_tracker_connection_api_never_shows_the_token(project, api):
    assert api.get("/api/v1/tickets/tracker/").status_code == 400
    response = api.put("/api/v1/tickets/tracker/", {"repository": "acme/desk"}, format="json")
    assert response.status_code == 400 and "token" in response.json()["message"]
    response = api.put("/api/v1/tickets/tracker/", {"repository": "not a repo", "token": "x" * 20}, format="json")
    assert response.status_code == 400
    response = api.put("/api/v1/tickets/tracker/", {"repository": "acme/desk", "token": "ghp_" + "s" * 16 + "WXYZ",
                                                    "base_url": "file:///etc/passwd"}, format="json")
    assert response.status_code == 400
    response = api.put("/api/v1/tickets/tracker/", {"repository": "acme/desk", "token": "ghp_" + "s" * 16 + "WXYZ"},
                       format="json")
    assert response.json() == {**response.json(), "repository": "acme/desk", "base_url": "https://api.github.com",
                               "token_hint": "…WXYZ", "enabled": True}
    assert "ssss" not in response.content.decode()
    assert api.delete("/api/v1/tickets/tracker/").status_code == 204
    assert api.get("/api/v1/tickets/tracker/").status_code == 400
