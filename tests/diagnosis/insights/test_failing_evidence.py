"""Issue 28, item 3: an insight's evidence comes from failing runs first, each quote says whether its run failed,
and the insight says how many of its traces failed and how many succeeded (insight page and REST API); the ticket's
"where it fires" link points at a failing trace when one exists.

The example agent's retry loop (billing_worker) fails its three tasks; here the trace of one of them (the one
stored first, whose citations used to come first) is recorded as a success, so its quotes must come after those of
the two failing runs.
"""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.selectors import insight_evidence_list
from diagnosis.tickets.fix import suggested_fix
from tests.diagnosis.insights.conftest import (  # noqa: F401 - desk_rubrics: the insights tests' fixture
    BUG_NODE, TOUCHED_BY, desk_rubrics, diagnose, insight_for_tasks,
)
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for
from traces.models import Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed(project, desk_rubrics):  # noqa: F811
    """(run, insight, the succeeding trace): the retry loop's insight, one of its three traces a success."""
    support_desk_ingest(project=project, bugs="all", release="r1")
    tasks = TOUCHED_BY["retry_loop"]
    first = Trace.objects.filter(project=project, task_id__in=tasks).order_by("pk").first()
    Trace.objects.filter(pk=first.pk).update(outcome="success")
    run = diagnose(project, "r1")
    insight = insight_for_tasks(project, BUG_NODE["retry_loop"], tasks, run)
    return run, insight, first


def test_evidence_from_failing_runs_first_and_each_says_whether_its_run_failed(project, owner, mixed):
    run, insight, succeeded = mixed
    evidence = list(insight_evidence_list(project=project, insight=insight))
    outcomes = [e.trace.outcome for e in evidence]
    assert "success" in outcomes and "failure" in outcomes
    assert outcomes == sorted(outcomes), outcomes  # every "failure" before any "success"

    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    shown = re.findall(r'data-testid="evidence-outcome" data-outcome="(\w+)"', page)
    assert shown and shown == outcomes[:len(shown)]  # the page shows the first EVIDENCE_LIMIT
    assert "run failed" in page and ("run succeeded" in page) == ("success" in shown)

    key = api_key_create(project=project, name="evidence", created_by=owner)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    rows = api.get(f"/api/v1/insights/{insight.pk}/evidence/?page_size=3").json()
    rows_all = rows["results"]
    while rows["next"]:
        rows = api.get(rows["next"]).json()
        rows_all += rows["results"]
    assert [r["trace_failed"] for r in rows_all] == [o == "failure" for o in outcomes]
    assert [r["trace_outcome"] for r in rows_all] == outcomes
    assert rows_all[0]["trace_failed"] is True and rows_all[-1]["trace_id"] == succeeded.trace_id


def test_the_insight_says_how_many_of_its_traces_failed_and_succeeded(project, owner, mixed):
    run, insight, _ = mixed
    key = api_key_create(project=project, name="shares", created_by=owner)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    shares = api.get(f"/api/v1/insights/{insight.pk}/").json()["outcome_shares"]
    assert (shares["failing_with_pattern"], shares["succeeding_with_pattern"]) == (2, 1)
    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert 'data-failed="2">2 failed</span>' in page and 'data-succeeded="1">1 succeeded</span>' in page


def test_where_it_fires_points_at_a_failing_trace(project, mixed):
    run, insight, succeeded = mixed
    evidence = list(insight_evidence_list(project=project, insight=insight))
    fix = suggested_fix(insight=insight, evidence=evidence)
    assert fix["trace_id"] and fix["trace_id"] != succeeded.trace_id
    assert Trace.objects.get(project=project, trace_id=fix["trace_id"]).outcome == "failure"
    # Also when the evidence comes in the order it used to (the trace stored first, a success, first).
    by_trace = sorted(evidence, key=lambda e: (e.trace_id, e.span_id))
    assert by_trace[0].trace_id == succeeded.pk
    assert suggested_fix(insight=insight, evidence=by_trace)["trace_id"] != succeeded.trace_id
