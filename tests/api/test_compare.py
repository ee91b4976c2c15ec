"""GET /api/v1/compare/: two runs (or the latest succeeded runs of two releases), their insights new, worse,
resolved, better and unchanged by the documented rule (diagnosis/services/compare.py)."""

import pytest
from rest_framework.test import APIClient

from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db

JUDGED = 40


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def _run(project, release="", insights_status="done", status=DiagnosisRun.Status.SUCCEEDED, judged=JUDGED):
    return DiagnosisRun.objects.create(project=project, release=release, status=status, judges=["rules"],
                                       total_count=judged, done_count=judged, insights_status=insights_status,
                                       insights_summary={"judged": judged})


def _occurs(insight, run, traces, judged=JUDGED):
    InsightOccurrence.objects.create(insight=insight, run=run, count=traces + 1, trace_count=traces, judged=judged,
                                     frequency=traces / judged, releases={run.release: traces})


def _insight(project, title, **fields):
    return Insight.objects.create(project=project, level=fields.pop("level", "node"),
                                  node=fields.pop("node", "planner"), title=title, **fields)


@pytest.fixture
def two_runs(project):
    base, head = _run(project, "v1"), _run(project, "v2")
    made = {}
    for name, before, after in [("new", 0, 5), ("resolved", 3, 0), ("worse", 2, 12), ("better", 12, 2),
                                ("noise", 2, 6), ("same", 4, 4)]:
        made[name] = _insight(project, f"{name} pattern")
        if before:
            _occurs(made[name], base, before)
        if after:
            _occurs(made[name], head, after)
    made["rejected"] = _insight(project, "rejected pattern", review="rejected")
    made["ignored"] = _insight(project, "ignored pattern", status="ignored")
    made["other"] = _insight(project, "other statements", is_other=True)
    made["system"] = _insight(project, "system pattern", level="system", node="")
    for name in ("rejected", "ignored", "other", "system"):
        _occurs(made[name], head, 9)
    # Merged away after the base run was built: its base figures count as its target's.
    made["target"] = _insight(project, "target pattern")
    made["source"] = _insight(project, "source pattern", merged_into=made["target"])
    _occurs(made["source"], base, 4)
    _occurs(made["target"], head, 4)
    return base, head, made


def _titles(body, change):
    return [row["title"] for row in body[change]]


def test_runs_compared_by_the_rule(client, two_runs):
    base, head, made = two_runs
    response = client.get(f"/api/v1/compare/?base_run={base.pk}&head_run={head.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["base"]["id"] == str(base.pk) and body["head"]["id"] == str(head.pk)
    assert body["base"]["judged"] == body["head"]["judged"] == JUDGED
    assert body["thresholds"] == {"min_delta": 0.05, "confidence": 0.95, "min_traces": 1}
    assert sorted(_titles(body, "new")) == ["new pattern", "system pattern"]
    assert _titles(body, "resolved") == ["resolved pattern"]
    assert _titles(body, "worse") == ["worse pattern"]
    assert _titles(body, "better") == ["better pattern"]
    # 2 → 6 of 40 is +0.10, but its interval holds 0: not meaningful. The merged-away source is its target.
    assert sorted(_titles(body, "unchanged")) == ["noise pattern", "same pattern", "target pattern"]
    assert body["counts"] == {"new": 2, "worse": 1, "resolved": 1, "better": 1, "unchanged": 3}
    [worse] = body["worse"]
    assert worse["base"] == {"count": 3, "trace_count": 2, "judged": JUDGED, "frequency": 0.05}
    assert worse["head"] == {"count": 13, "trace_count": 12, "judged": JUDGED, "frequency": 0.3}
    assert worse["delta"] == pytest.approx(0.25) and 0 < worse["delta_low"] < 0.25 < worse["delta_high"]
    assert worse["id"] == made["worse"].pk and worse["url"] == f"/api/v1/insights/{made['worse'].pk}/"
    [new] = [row for row in body["new"] if row["title"] == "new pattern"]
    assert new["base"]["trace_count"] == 0 and new["base"]["frequency"] == 0.0 and new["change"] == "new"


def test_thresholds_and_level_are_query_parameters(client, two_runs):
    base, head, _ = two_runs
    url = f"/api/v1/compare/?base_run={base.pk}&head_run={head.pk}"
    body = client.get(url + "&min_delta=0.3&min_traces=6&level=node").json()
    assert body["thresholds"] == {"min_delta": 0.3, "confidence": 0.95, "min_traces": 6}
    assert body["counts"] == {"new": 0, "worse": 0, "resolved": 1, "better": 0, "unchanged": 6}
    # A looser confidence makes the +0.10 meaningful.
    assert "noise pattern" in _titles(client.get(url + "&confidence=0.5").json(), "worse")
    for bad in ("min_delta=2", "confidence=1", "min_traces=0", "level=team"):
        response = client.get(f"{url}&{bad}")
        assert response.status_code == 400 and response.json()["code"] == "invalid", bad


def test_releases_use_their_latest_succeeded_run(client, project, two_runs):
    base, head, _ = two_runs
    _run(project, "v2", status=DiagnosisRun.Status.FAILED)  # newer, but not succeeded
    body = client.get("/api/v1/compare/?base_release=v1&head_release=v2").json()
    assert (body["base"]["id"], body["head"]["id"]) == (str(base.pk), str(head.pk))
    assert body["counts"]["worse"] == 1
    # One side by run, the other by release.
    assert client.get(f"/api/v1/compare/?base_release=v1&head_run={head.pk}").json()["counts"]["worse"] == 1
    # The same run on both sides: nothing changed.
    same = client.get("/api/v1/compare/?base_release=v2&head_release=v2").json()
    assert same["counts"]["new"] == same["counts"]["worse"] == same["counts"]["resolved"] == 0


def test_errors_say_what_to_do(client, project, two_runs):
    base, head, _ = two_runs
    response = client.get("/api/v1/compare/?base_release=v9&head_release=v2")
    assert response.status_code == 404 and response.json()["code"] == "release_not_diagnosed"
    assert "POST /api/v1/runs/" in response.json()["message"]
    response = client.get(f"/api/v1/compare/?base_run={base.pk}&base_release=v1&head_run={head.pk}")
    assert response.status_code == 400 and response.json()["code"] == "compare_invalid"
    response = client.get(f"/api/v1/compare/?head_run={head.pk}")
    assert response.status_code == 400 and "base_run" in response.json()["message"]
    building = _run(project, "v3", insights_status="running")
    response = client.get(f"/api/v1/compare/?base_run={base.pk}&head_run={building.pk}")
    assert response.status_code == 409 and response.json()["code"] == "insights_not_ready"
    running = _run(project, "v3", status=DiagnosisRun.Status.RUNNING, insights_status="")
    response = client.get(f"/api/v1/compare/?base_run={running.pk}&head_run={head.pk}")
    assert response.status_code == 409 and "running" in response.json()["message"]
    response = client.get(f"/api/v1/compare/?base_run=00000000-0000-0000-0000-000000000000&head_run={head.pk}")
    assert response.status_code == 404


def test_the_support_desk_misroute_is_new_and_then_resolved(client, project, desk_rubrics):  # noqa: F811
    support_desk_ingest(project=project, bugs="none", release="good")
    support_desk_ingest(project=project, bugs="misroute", release="bad")
    good, bad = diagnose(project, "good"), diagnose(project, "bad")
    body = client.get("/api/v1/compare/?base_release=good&head_release=bad&level=node").json()
    assert (body["base"]["id"], body["head"]["id"]) == (str(good.pk), str(bad.pk))
    assert body["base"]["judged"] == body["head"]["judged"] == 22
    planner = [row for row in body["new"] if row["node"] == "planner"]
    assert planner and all(row["head"]["trace_count"] == 4 for row in planner), body["new"]
    assert body["counts"]["worse"] == 0
    new_ids = {row["id"] for row in body["new"]}
    back = client.get("/api/v1/compare/?base_release=bad&head_release=good&level=node").json()
    assert {row["id"] for row in back["resolved"]} == new_ids and back["counts"]["new"] == 0
