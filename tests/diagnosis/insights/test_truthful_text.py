"""Issue 26, items 12 and 13: what an insight says about itself is true.

A rubric's finding is titled by what went wrong, where, in plain words, then the rubric it violates (not by the
rubric's mechanism, "Forbidden text in …"). Without a model, an insight's root cause and recommendation state only
computed facts (what the deciding step did and what it had in front of it, the earliest step its statements cite,
its share of failing and succeeding traces), never the title again nor the cluster's distinctive terms, and point at
that decision instead of a place to "start at" (issue 41); a ticket's suggested fix points at the node the insight is
about. The naming prompt shows the title's shape by an example, not by field descriptions a small model
copies as the title."""

from __future__ import annotations

import re

import pytest

from diagnosis.judges.rubric_checks import rubric_check
from diagnosis.judges.rubric_config import rubric_config_validate
from diagnosis.services.rubrics import rubric_create_demo_set
from diagnosis.models import Insight
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import diagnose
from tests.diagnosis.support import span, support_desk_ingest, view
from traces.models import Span, Trace

RUBRIC = "Cancellations go to accounts"


def _rubric(kind: str, config: dict, node: str = "") -> dict:
    return {"id": 3, "name": RUBRIC, "kind": kind, "node": node, "config": rubric_config_validate(kind, config)}


def _trace():
    return view(
        span("r", kind="LLM", node="router", output='{"intent": "cancel", "note": "asap", "worker": "search"}', at=1),
        span("s", kind="TOOL", node="search", tool_name="catalog_search", input={"q": "cancel"},
             output={"sku": "K-77", "title": "Plan"}, at=2),
        span("a", kind="LLM", node="answerer", input="brief", output="Your plan is cancelled.", at=3),
    )


def _title(kind: str, config: dict, node: str = "") -> str:
    result = rubric_check(_rubric(kind, config, node), _trace())
    assert result.verdict == "fail", result
    return result.issues[0].title


def test_a_rubric_title_says_what_went_wrong_where_then_the_rubric():
    violates = f" (violates \u201c{RUBRIC}\u201d)"
    # A forbidden match in JSON: the pairs the pattern names, not the fields its [^}]* skipped.
    forbidden = {"pattern": r'"intent":\s*"cancel"[^}]*"worker":\s*"search"', "expect": "absent",
                 "spans": {"node": "router"}}
    assert _title("regex", forbidden) == "`router` writes `intent: cancel`, `worker: search`" + violates
    assert _title("tool_never", {"tool": "catalog_search"}) == "`search` calls `catalog_search`" + violates
    assert _title("coverage", {"path": "$.sku", "sources": {"kind": "TOOL"}, "target": {"node": "answerer"}}) \
        == "`answerer` drops the `sku` that `catalog_search` returned" + violates
    assert _title("jsonpath", {"path": "$.worker", "assert": "equals", "value": "accounts",
                               "spans": {"node": "router"}}) == "`router` writes `$.worker: search`" + violates
    assert _title("tool_order", {"first": "account_lookup"}, node="search") \
        == "`search` never calls `account_lookup`" + violates


def test_an_insight_title_cuts_what_went_wrong_but_keeps_the_rubric():
    from diagnosis.insights.groups import clip

    long = "`router` writes `" + "x" * 90 + "` (violates \u201cRefunds go to billing\u201d)"
    assert clip(long).endswith("(violates \u201cRefunds go to billing\u201d)")


def test_the_naming_prompt_shows_an_example_title_not_field_descriptions():
    from diagnosis.insights import naming

    assert "at most 80 characters, names the failure" not in naming.NAMING_SYSTEM
    assert "\"title\": \"" not in naming.NAMING_SYSTEM  # no reply template whose values are descriptions
    assert "(violates \u201c" in naming.EXAMPLE_TITLE and naming.EXAMPLE_TITLE in naming.NAMING_SYSTEM
    reply = {"title": "", "description": "d", "root_cause": "r", "recommendation": "c"}
    for copied in ("at most 80 characters, names the failure, not the symptom's ids", naming.EXAMPLE_TITLE):
        assert naming.naming_problems({**reply, "title": copied}), copied
    assert not naming.naming_problems({**reply, "title": "`writer` promises refunds without a lookup"})


@pytest.fixture
def demo_run(project, settings):
    """The demo's diagnosis without a model: v1 with every planted bug, v2 with the misroute fixed, its rubrics."""
    settings.CLEAR_JUDGE_MODEL = ""
    rubric_create_demo_set(project=project)
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    return diagnose(project, "")


_SHARE = re.compile(r"It is in (\d+) of the (\d+) failing traces and (\d+) of the (\d+) succeeding ones")


@pytest.mark.django_db
def test_demo_rubric_insights_say_what_went_wrong(project, demo_run):
    titles = list(Insight.objects.filter(project=project, is_other=False).values_list("title", flat=True))
    assert "`planner` writes `intent: refund`, `worker: orders_worker` (violates \u201cRefund requests are routed to " \
           "billing\u201d)" in titles, titles
    assert "`orders_worker` calls `order_lookup` (violates \u201cRefund tickets are not answered from the order " \
           "records\u201d)" in titles, titles
    assert not [t for t in titles if "Forbidden text" in t or ", violating" in t or "is missing from" in t], titles


@pytest.mark.django_db
def test_demo_insights_state_computed_facts_without_a_model(project, demo_run):
    insights = list(Insight.objects.filter(project=project, is_other=False, occurrences__run=demo_run))
    failing = Trace.objects.filter(project=project, outcome="failure").count()
    succeeding = Trace.objects.filter(project=project, outcome="success").count()
    for insight in insights:
        text = f"{insight.description}\n{insight.root_cause}\n{insight.recommendation}"
        assert "Key terms" not in text and "Look at what the statements share" not in text, text
        for said in (insight.root_cause, insight.recommendation):
            assert insight.title.rstrip("\u2026") not in said and "Fix the behaviour" not in said, said
        share = _SHARE.search(insight.root_cause)
        assert share, insight.root_cause
        assert (int(share[2]), int(share[4])) == (failing, succeeding)
        assert int(share[1]) + int(share[3]) == insight.trace_count
        if insight.level == Insight.Level.NODE:
            # The decision, by the node's own step, then where the statements first show.
            assert insight.root_cause.startswith(f"{insight.node} ("), insight.root_cause
            assert f"The earliest step its statements cite is {insight.node} (" in insight.root_cause
            assert f"{insight.node} (" in insight.recommendation, insight.recommendation
        for banned in ("Start at", "Start from", "so that the rubric holds", "It first appears", "Next, the agent"):
            assert banned not in insight.recommendation and banned not in insight.root_cause, insight
    retry = next(i for i in insights if i.level == Insight.Level.NODE and i.node == "billing_worker"
                 and i.failure_association == "associated")
    # What the agent did and had in front of it, from the spans: it called the tool again after its refusal.
    assert "billing_worker (chat gpt-4o-mini) called `invoice_lookup` 5 times with `{\"invoice_id\": " \
        in retry.root_cause, retry.root_cause
    assert "It had in front of it the same call's earlier reply `rate_limited`" in retry.root_cause
    assert retry.recommendation.startswith("Make billing_worker (chat gpt-4o-mini) act on the reply it had before "
                                           "calling `invoice_lookup` again"), retry.recommendation


@pytest.mark.django_db
def test_a_suggested_fix_points_at_the_node_the_insight_is_about(project, demo_run):
    for node in ("mediator", "billing_worker"):
        ticket = Ticket.objects.get(project=project, insight__level=Insight.Level.NODE, insight__node=node)
        fix = ticket.suggested_fix
        span_at = Span.objects.get(trace__trace_id=fix["trace_id"], span_id=fix["span_id"])
        assert span_at.node == node, (node, fix)
        assert f"at node {node}" in fix["text"] and "Start from that span" not in fix["text"], fix["text"]
        # It points at the decision: a model turn of that node, and says what it decided there.
        assert span_at.kind == "LLM" and f"{node} ({span_at.name})" in fix["text"], fix["text"]
        assert "so that the rubric holds" not in fix["text"], fix["text"]
