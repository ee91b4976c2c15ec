"""One row per problem (issue 39): GET /api/v1/insights/ nests the node insights a system insight holds under it
(`nodes`) by default, `level=` gives the flat lists; the compare API and `clearctl gate` count a bug once; a
nested node insight sends no webhook of its own; an outlier finding alone not associated with failure is no row."""

import pytest
from django.db import transaction
from rest_framework.test import APIClient

from clear.webhooks.models import WebhookDelivery
from clear.webhooks.services import webhook_create
from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightLink, InsightOccurrence, InsightStatement
from diagnosis.services.insights_webhooks import insights_built_webhooks_emit
from tests.api.conftest import make_trace

pytestmark = pytest.mark.django_db

JUDGED = 40


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def _insight(project, title, level="node", node="planner", **fields):
    return Insight.objects.create(project=project, level=level, node=node if level == "node" else "", title=title,
                                  **fields)


def _link(system, node):
    InsightLink.objects.create(system=system, node=node, shared=3, share=1.0)


@pytest.fixture
def problems(project):
    """A misroute-like bug (one system insight holding planner's and orders_worker's insights), a node insight
    shared by two system insights, and an orphan node insight."""
    made = {
        "misroute": _insight(project, "routes refunds to orders", level="system"),
        "planner": _insight(project, "planner writes intent refund"),
        "orders": _insight(project, "orders_worker calls order_lookup", node="orders_worker"),
        "other_system": _insight(project, "a second system pattern", level="system"),
        "shared": _insight(project, "shared node pattern", node="mediator"),
        "orphan": _insight(project, "billing loops", node="billing_worker"),
    }
    _link(made["misroute"], made["planner"])
    _link(made["misroute"], made["orders"])
    _link(made["misroute"], made["shared"])
    _link(made["other_system"], made["shared"])
    return made


def test_the_default_list_is_one_row_per_problem_with_nodes_nested(client, problems):
    rows = client.get("/api/v1/insights/").json()["results"]
    assert sorted(r["id"] for r in rows) == sorted(problems[k].pk for k in ("misroute", "other_system", "orphan"))
    by_id = {r["id"]: r for r in rows}
    nested = {r["id"]: sorted(n["id"] for n in r["nodes"]) for r in rows}
    assert nested[problems["misroute"].pk] == sorted(problems[k].pk for k in ("planner", "orders", "shared"))
    assert nested[problems["other_system"].pk] == [problems["shared"].pk]  # shared: under each that holds it
    assert nested[problems["orphan"].pk] == []
    node = by_id[problems["misroute"].pk]["nodes"][0]
    assert {"id", "node", "title", "severity", "status", "frequency", "url"} <= set(node)
    assert client.get(node["url"]).json()["id"] == node["id"]  # each nested node insight keeps its own page

    flat_nodes = client.get("/api/v1/insights/?level=node").json()["results"]
    assert sorted(r["id"] for r in flat_nodes) == sorted(problems[k].pk for k in ("planner", "orders", "shared",
                                                                                  "orphan"))
    flat_systems = client.get("/api/v1/insights/?level=system").json()["results"]
    assert sorted(r["id"] for r in flat_systems) == sorted(problems[k].pk for k in ("misroute", "other_system"))
    assert all("nodes" not in r for r in flat_nodes + flat_systems)  # the flat lists are unchanged


def test_a_node_insight_whose_system_insight_is_hidden_is_its_own_row(client, problems):
    Insight.objects.filter(pk__in=[problems["misroute"].pk, problems["other_system"].pk]).update(review="rejected")
    rows = client.get("/api/v1/insights/").json()["results"]
    assert sorted(r["id"] for r in rows) == sorted(problems[k].pk for k in ("planner", "orders", "shared",
                                                                            "orphan"))


def _run(project, release):
    return DiagnosisRun.objects.create(project=project, release=release, status=DiagnosisRun.Status.SUCCEEDED,
                                       judges=["rules"], total_count=JUDGED, done_count=JUDGED,
                                       insights_status="done", insights_summary={"judged": JUDGED})


def _occurs(insight, run, traces):
    InsightOccurrence.objects.create(insight=insight, run=run, count=traces, trace_count=traces, judged=JUDGED,
                                     frequency=traces / JUDGED, releases={run.release: traces})


def test_compare_counts_a_bug_once_with_its_node_insights_nested(client, problems, project):
    _run(project, "v1")
    head = _run(project, "v2")
    for name in ("misroute", "planner", "orders", "orphan"):
        _occurs(problems[name], head, 6)
    body = client.get("/api/v1/compare/", {"base_release": "v1", "head_release": "v2"}).json()
    assert body["counts"]["new"] == 2
    rows = {r["id"]: r for r in body["new"]}
    assert set(rows) == {problems["misroute"].pk, problems["orphan"].pk}
    assert sorted(n["id"] for n in rows[problems["misroute"].pk]["nodes"]) == sorted(
        [problems["planner"].pk, problems["orders"].pk])
    assert {n["change"] for n in rows[problems["misroute"].pk]["nodes"]} == {"new"}
    by_level = client.get("/api/v1/compare/", {"base_release": "v1", "head_release": "v2", "level": "node"}).json()
    assert by_level["counts"]["new"] == 3  # the flat node-level comparison is unchanged


def test_clearctl_gate_counts_the_bug_once(client, problems, project, capsys):
    """The gate's verdict and summary from the compare API's answer (what `clearctl gate` fetches)."""
    import argparse

    from clear.cli_gate import _over, _print_summary, junit_xml

    base, head = _run(project, "v1"), _run(project, "v2")
    for name in ("misroute", "planner", "orders"):
        _occurs(problems[name], head, 6)
    comparison = client.get("/api/v1/compare/", {"base_run": str(base.pk), "head_run": str(head.pk)}).json()
    comparison["base"], comparison["head"] = {"id": str(base.pk), "judged": JUDGED}, {"id": str(head.pk),
                                                                                       "judged": JUDGED}
    args = argparse.Namespace(release="v2", baseline_release="v1", max_new=1, max_worse=0)
    over = _over(comparison, {"new": 1, "worse": 0})
    assert over == {"new": False, "worse": False}  # one new problem, within --max-new 1
    _print_summary(comparison, args, over)
    out = capsys.readouterr().out
    assert "new 1 (max 1)" in out and "└ orders_worker" in out and out.rstrip().endswith("PASSED"), out
    assert junit_xml(comparison, args, over).count(b"<testcase") == 2  # the gate and the one problem


@pytest.fixture
def hook(project, settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    return webhook_create(project=project, url="http://127.0.0.1:9/hook", events=["insight.created"])


def test_a_nested_node_insight_sends_no_webhook_of_its_own(project, problems, hook):
    run = _run(project, "v1")
    created = [problems[k].pk for k in ("misroute", "planner", "orders", "orphan")]
    for pk in created:
        _occurs(Insight.objects.get(pk=pk), run, 5)
    with transaction.atomic():
        insights_built_webhooks_emit(run=run, created=created, matched=[], reopened=[])
    sent = [d.payload["data"]["insight"]["id"]
            for d in WebhookDelivery.objects.filter(webhook=hook, event="insight.created")]
    assert sorted(sent) == sorted([problems["misroute"].pk, problems["orphan"].pk])


def _outlier_insight(project, run, *, lift_low):
    insight = _insight(project, "chat (planner): N tokens is far above the node's median", lift=2.0,
                       lift_low=lift_low, lift_high=3.0)
    trace = make_trace(project)
    feedback = Feedback.objects.create(run=run, project=project, trace=trace, judge="rule.token_outlier",
                                       judge_kind="rule", verdict="fail", target_span_id="a" * 16)
    InsightStatement.objects.create(project=project, run=run, feedback=feedback, trace=trace, kind="issue",
                                    text=insight.title, node="planner", judge="rule.token_outlier",
                                    node_insight=insight)
    return insight


def test_an_outlier_alone_is_listed_only_when_associated_with_failure(client, project, hook):
    run = _run(project, "v1")
    noise = _outlier_insight(project, run, lift_low=0.8)
    blowup = _outlier_insight(project, run, lift_low=1.5)
    ids = [r["id"] for r in client.get("/api/v1/insights/").json()["results"]]
    assert blowup.pk in ids and noise.pk not in ids
    assert noise.pk not in [r["id"] for r in client.get("/api/v1/insights/?level=node").json()["results"]]
    for insight in (noise, blowup):
        _occurs(insight, run, 5)
    with transaction.atomic():
        insights_built_webhooks_emit(run=run, created=[noise.pk, blowup.pk], matched=[], reopened=[])
    sent = [d.payload["data"]["insight"]["id"] for d in WebhookDelivery.objects.filter(webhook=hook,
                                                                                      event="insight.created")]
    assert sent == [blowup.pk]
