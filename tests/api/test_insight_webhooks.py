"""insight.created and insight.regressed, sent from the insights build to a receiving server this test starts
(signatures checked): new insights once, regressions when a fixed insight is reopened or its frequency rose by
CLEAR_INSIGHT_REGRESSION_DELTA since its last run."""

import json

import pytest
from rest_framework.test import APIClient

from diagnosis.models import Insight, InsightLink, InsightStatement
from examples.support_desk import TASKS
from tests.api.test_webhooks import Receiver, _signature_ok
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db

ALL_TASKS = [t.task_id for t in TASKS]
FEWER_REFUNDS = [t for t in ALL_TASKS if t != "refund-late-delivery"]


@pytest.fixture(autouse=True)
def _local_receivers_allowed(settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True  # the Receiver listens on 127.0.0.1, a loopback address


def _events(receiver, secret: str, since: int = 0) -> list[dict]:
    requests = receiver.requests[since:]
    assert all(_signature_ok(r, secret) for r in requests)
    bodies = [json.loads(r["body"]) for r in requests]
    assert all(b["event"] == r["headers"]["X-Clear-Event"] for b, r in zip(bodies, requests))
    return bodies


def _diagnose(project, release, capture):
    with capture(execute=True):  # deliveries leave after the build commits
        return diagnose(project, release)


def test_created_then_regressed_by_frequency_then_reopened(project, issued_key, settings, desk_rubrics,  # noqa: F811
                                                           django_capture_on_commit_callbacks):
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    with Receiver() as receiver:
        webhook = client.post("/api/v1/webhooks/", {"url": receiver.url,
                                                    "events": ["insight.created", "insight.regressed"]},
                              format="json").json()
        secret = webhook["secret"]

        # r1: one of the four misrouted refunds left out, so the routing rubric's insight has 3 of 21 traces.
        support_desk_ingest(project=project, bugs="misroute", release="r1", task_ids=FEWER_REFUNDS)
        r1 = _diagnose(project, "r1", django_capture_on_commit_callbacks)
        created = _events(receiver, secret)
        assert {e["event"] for e in created} == {"insight.created"}
        # One problem, one webhook: the node insights the misroute's system insight holds send none of their own.
        nested = set(InsightLink.objects.filter(system__project=project).values_list("node_id", flat=True))
        assert nested and len(created) == r1.insights_summary["new"] - len(nested) > 0
        ids = {e["data"]["insight"]["id"] for e in created}
        assert ids == set(Insight.objects.filter(project=project, is_other=False).exclude(pk__in=nested)
                          .values_list("pk", flat=True))
        routing = desk_rubrics[3].judge_name
        misroute = set(InsightStatement.objects.filter(run=r1, judge=routing, system_insight__isnull=False)
                       .values_list("system_insight_id", flat=True))
        planner = [e["data"] for e in created if e["data"]["insight"]["id"] in misroute]
        assert len(planner) == 1 and planner[0]["insight"]["level"] == "system"
        assert (planner[0]["occurrence"]["trace_count"], planner[0]["occurrence"]["judged"]) == (3, 21)
        assert all(e["data"]["run"]["id"] == str(r1.pk) and e["data"]["run"]["release"] == "r1" for e in created)
        planner_ids = {p["insight"]["id"] for p in planner}

        # r2: all four: 3/21 → 4/22, +0.039, past a threshold of 0.03.
        settings.CLEAR_INSIGHT_REGRESSION_DELTA = 0.03
        seen = len(receiver.requests)
        support_desk_ingest(project=project, bugs="misroute", release="r2")
        r2 = _diagnose(project, "r2", django_capture_on_commit_callbacks)
        events = _events(receiver, secret, seen)
        assert "insight.created" not in {e["event"] for e in events if e["data"]["insight"]["id"] in planner_ids}
        regressed = [e["data"] for e in events if e["event"] == "insight.regressed"]
        assert planner_ids <= {r["insight"]["id"] for r in regressed}
        for r in regressed:
            assert r["reason"] == "frequency" and r["threshold"] == 0.03 and r["run"]["id"] == str(r2.pk)
            assert r["previous"]["run"] == str(r1.pk)
            assert r["occurrence"]["frequency"] - r["previous"]["frequency"] >= 0.03

        # r3: the same figures, not past a higher threshold; but a fixed insight that comes back is reopened.
        settings.CLEAR_INSIGHT_REGRESSION_DELTA = 0.5
        fixed = sorted(planner_ids)[0]
        assert client.post(f"/api/v1/insights/{fixed}/status/", {"status": "fixed"}, format="json").status_code == 200
        seen = len(receiver.requests)
        support_desk_ingest(project=project, bugs="misroute", release="r3")
        _diagnose(project, "r3", django_capture_on_commit_callbacks)
        events = _events(receiver, secret, seen)
        assert [(e["event"], e["data"]["reason"], e["data"]["insight"]["id"]) for e in events] == [
            ("insight.regressed", "reopened", fixed)]
        assert events[0]["data"]["insight"]["status"] == "open" and events[0]["data"]["insight"]["reopen_count"] == 1


def test_rejected_insights_send_nothing(project, issued_key, desk_rubrics,  # noqa: F811
                                        django_capture_on_commit_callbacks):
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    support_desk_ingest(project=project, bugs="misroute", release="r1")
    diagnose(project, "r1")
    for insight in Insight.objects.filter(project=project, is_other=False):
        client.post(f"/api/v1/insights/{insight.pk}/status/", {"status": "fixed"}, format="json")
        client.post(f"/api/v1/insights/{insight.pk}/reject/", {}, format="json")
    with Receiver() as receiver:
        created = client.post("/api/v1/webhooks/", {"url": receiver.url,
                                                    "events": ["insight.created", "insight.regressed"]}, format="json")
        assert created.status_code == 201, created.content
        support_desk_ingest(project=project, bugs="misroute", release="r2")
        _diagnose(project, "r2", django_capture_on_commit_callbacks)
    assert receiver.requests == []
