import pytest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.db import connection

from diagnosis.models import DiagnosisRun
from clear.projects.services import api_key_create
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


def _client(key):
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def test_runs_and_rubrics_over_the_api(issued_key, project, settings, django_capture_on_commit_callbacks):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", task_ids=["refund-status", "return-policy"])
    client = _client(issued_key)
    bad = client.post("/api/v1/rubrics/create", {"name": "x", "kind": "regex", "config": {"pattern": "("}},
                      content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "rubric_invalid"
    assert "not a valid regular expression" in bad.json()["message"]
    created = client.post("/api/v1/rubrics/create", {"name": "refunds skip order lookup", "kind": "tool_never",
                                                      "config": {"tool": "order_lookup"}},
                          content_type="application/json")
    assert created.status_code == 201, created.content
    rubric_id = created.json()["id"]
    updated = client.post(f"/api/v1/rubrics/{rubric_id}/update", {"config": {"tool": "order_lookup",
                                                                            "when": {"goal_regex": "refund"}}},
                          content_type="application/json")
    assert updated.status_code == 200 and updated.json()["config"]["when"] == {"goal_regex": "refund"}
    assert [r["id"] for r in client.get("/api/v1/rubrics").json()] == [rubric_id]

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/diagnosis/runs/create", {"judges": ["rules", "rubrics"]},
                               content_type="application/json")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    detail = client.get(f"/api/v1/diagnosis/runs/{run_id}").json()
    assert detail["status"] == "succeeded" and detail["done_count"] == 2  # eager tasks in unit tests
    assert detail["summary"]["failing_by_judge"][f"rubric.{rubric_id}"] == 1
    failing = client.get(f"/api/v1/diagnosis/runs/{run_id}/feedback", {"verdict": "fail"}).json()
    assert [(f["judge"], f["verdict"]) for f in failing["results"]] == [(f"rubric.{rubric_id}", "fail")]
    page = client.get(f"/api/v1/diagnosis/runs/{run_id}/feedback", {"limit": 2, "offset": 1}).json()
    assert page["count"] > 3 and len(page["results"]) == 2
    with CaptureQueriesContext(connection) as queries:
        client.get(f"/api/v1/diagnosis/runs/{run_id}/feedback", {"limit": 100})
    assert len(queries) <= 6
    cancel = client.post(f"/api/v1/diagnosis/runs/{run_id}/cancel")
    assert cancel.status_code == 409 and cancel.json()["code"] == "run_finished"
    assert [r["id"] for r in client.get("/api/v1/diagnosis/runs").json()] == [run_id]
    bad_run = client.post("/api/v1/diagnosis/runs/create", {"judges": ["nope"]}, content_type="application/json")
    assert bad_run.status_code == 400 and "Unknown judge" in bad_run.json()["message"]
    assert client.post(f"/api/v1/rubrics/{rubric_id}/delete").status_code == 204


def test_other_projects_runs_are_not_found(issued_key, project, outsider_project, outsider):
    other_key = api_key_create(project=outsider_project, name="k", created_by=outsider)
    run = DiagnosisRun.objects.create(project=outsider_project)
    assert _client(issued_key).get(f"/api/v1/diagnosis/runs/{run.pk}").status_code == 404
    assert _client(other_key).get(f"/api/v1/diagnosis/runs/{run.pk}").status_code == 200
    assert Client().get(f"/api/v1/diagnosis/runs/{run.pk}").status_code == 401
