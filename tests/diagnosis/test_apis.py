import pytest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.db import connection

from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


def _client(key):
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def test_runs_and_rubrics_over_the_api(issued_key, project, settings, django_capture_on_commit_callbacks):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", task_ids=["refund-status", "return-policy"])
    client = _client(issued_key)
    bad = client.post("/api/v1/rubrics/", {"name": "x", "kind": "regex", "config": {"pattern": "("}},
                      content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "rubric_invalid"
    assert "not a valid regular expression" in bad.json()["message"]
    created = client.post("/api/v1/rubrics/", {"name": "refunds skip order lookup", "kind": "tool_never",
                                               "config": {"tool": "order_lookup"}},
                          content_type="application/json")
    assert created.status_code == 201, created.content
    rubric_id = created.json()["id"]
    updated = client.patch(f"/api/v1/rubrics/{rubric_id}/", {"config": {"tool": "order_lookup",
                                                                       "when": {"goal_regex": "refund"}}},
                           content_type="application/json")
    assert updated.status_code == 200 and updated.json()["config"]["when"] == {"goal_regex": "refund"}
    assert [r["id"] for r in client.get("/api/v1/rubrics/").json()["results"]] == [rubric_id]

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/runs/", {"judges": ["rules", "rubrics"]}, content_type="application/json")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    detail = client.get(f"/api/v1/runs/{run_id}/").json()
    assert detail["status"] == "succeeded" and detail["done_count"] == 2  # eager tasks in unit tests
    assert detail["summary"]["failing_by_judge"][f"rubric.{rubric_id}"] == 1
    failing = client.get("/api/v1/feedback/", {"run": run_id, "verdict": "fail"}).json()
    assert [(f["judge"], f["verdict"]) for f in failing["results"]] == [(f"rubric.{rubric_id}", "fail")]
    page = client.get("/api/v1/feedback/", {"run": run_id, "page_size": 2}).json()
    assert len(page["results"]) == 2 and page["next"]
    with CaptureQueriesContext(connection) as queries:
        client.get("/api/v1/feedback/", {"run": run_id, "page_size": 100})
    assert len(queries) <= 6
    cancel = client.post(f"/api/v1/runs/{run_id}/cancel/")
    assert cancel.status_code == 409 and cancel.json()["code"] == "run_finished"
    assert [r["id"] for r in client.get("/api/v1/runs/").json()["results"]] == [run_id]
    bad_run = client.post("/api/v1/runs/", {"judges": ["nope"]}, content_type="application/json")
    assert bad_run.status_code == 400 and "Unknown judge" in bad_run.json()["message"]
    assert client.delete(f"/api/v1/rubrics/{rubric_id}/").status_code == 204
