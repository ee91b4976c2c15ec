"""Issue 43.2: model-written text that is shown must be grounded in what it was written from. A title naming an
agent or tool absent from the cluster, a title restating the task and a root cause quoting a value found in no span
are asked again once with the reason, then replaced by the computed text, and the API says which; grounded texts
are kept unchanged (fake OpenAI-compatible server)."""

import json
from types import SimpleNamespace

import pytest
from django.test import Client

from clear import llm
from diagnosis.insights.naming import NamingUsage, llm_namer_build
from diagnosis.judges.llm import LlmJudgeConfig, judge_trace_with_llm
from tests.diagnosis.llm.helpers import data_block, judge_of, judge_reply, linear_trace

MODEL = "openai/gpt-4o-mini"
GROUNDED = {"title": "`invoice_lookup` called with the order id instead of the invoice id",
            "description": "The billing worker passes the order id to `invoice_lookup`, which finds no invoice.",
            "root_cause": "The billing prompt does not say which id `invoice_lookup` takes.",
            "recommendation": "Say in the billing prompt that `invoice_lookup` takes the invoice id."}
STATEMENT = "billing called invoice_lookup with the order id O-5012 instead of the invoice id, so no invoice was found."


@pytest.fixture
def configured(settings, fake_llm, monkeypatch):
    settings.CLEAR_JUDGE_API_BASE = fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    monkeypatch.setattr(llm, "sleep", lambda seconds: None)
    return fake_llm


def naming_request():
    from diagnosis.clustering import ClusterName

    cluster = SimpleNamespace(id="c1", level="node", node="billing", size=3, trace_ids=["t1"], nodes={"billing": 3})
    offline = ClusterName(title="Billing called invoice_lookup with the order id <id> instead of the invoice id",
                          description="3 statements", terms=["invoice_lookup", "order id"])
    return SimpleNamespace(cluster=cluster, medoid_text=STATEMENT, example_texts=[STATEMENT],
                           terms=["invoice_lookup", "order id"], offline=offline)


@pytest.mark.django_db
@pytest.mark.parametrize("title, reason", [
    ("The Lambda agent's error handling in the router service fails", "names \u201cLambda\u201d, \u201crouter\u201d"),
    ("`refund_tool` is called with the order id", "names \u201crefund_tool\u201d"),
    ("The customer has cancelled the flight.", "names no failure"),
    ("The problem is: The Lambda Agent's error handling in the router service was not properly handled by the "
     "server. This can be prevented with a simple change to the server configuration.", "a title has at most 80"),
])
def test_an_ungrounded_title_is_asked_again_then_replaced_by_the_computed_name(configured, title, reason):
    configured.script(default=json.dumps({**GROUNDED, "title": title}))
    usage = NamingUsage()
    request = naming_request()
    name = llm_namer_build(model=MODEL, usage=usage)(request)

    assert configured.call_count == 2  # asked once more, with the reason
    assert "not grounded" in configured.requests[1]["messages"][-1]["content"]
    assert name.source == "offline" and name.title == request.offline.title
    assert reason in name.note and usage.replaced == 1 and usage.failed == 0

    configured.script()  # the rejection is cached: the locked pass and a re-run say the same without a call
    again = llm_namer_build(model=MODEL, usage=NamingUsage(), cache_only=True)(request)
    assert configured.call_count == 0 and again.note == name.note


@pytest.mark.django_db
def test_a_title_restating_the_task_is_replaced(configured, monkeypatch):
    from diagnosis.insights import naming

    monkeypatch.setattr(naming, "cluster_tasks", lambda **kwargs: ["Cancel the duplicate invoice lookup for O-5012"])
    configured.script(default=json.dumps({**GROUNDED, "title": "Cancel the duplicate invoice lookup for O-5012"}))
    name = llm_namer_build(model=MODEL, usage=NamingUsage(), project_id=1)(naming_request())
    assert configured.call_count == 2 and name.source == "offline" and "restates the task" in name.note


@pytest.mark.django_db
def test_a_grounded_name_is_kept_unchanged(configured):
    configured.script(json.dumps(GROUNDED))
    name = llm_namer_build(model=MODEL, usage=NamingUsage())(naming_request())
    assert configured.call_count == 1
    assert (name.source, name.title, name.description, name.note) == ("llm", GROUNDED["title"],
                                                                       GROUNDED["description"], "")


def _config(fake_llm, **overrides) -> LlmJudgeConfig:
    return LlmJudgeConfig(model=MODEL, api_base=fake_llm.api_base, api_key="test-key", **overrides)


def _trace_reply(reason: str):
    def reply(request):
        value = json.loads(judge_reply(request, score=0.25))
        value["root_cause"]["reason"] = reason
        return json.dumps(value)

    return reply


def test_a_root_cause_quoting_a_value_found_in_no_span_is_replaced_by_the_computed_one(fake_llm):
    fake_llm.script(default=_trace_reply('The step answered "refund approved for INV-9" without a lookup.'))
    [result] = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm, step_judges=False))

    assert fake_llm.call_count == 2
    assert "refund approved for INV-9" in fake_llm.requests[1]["messages"][-1]["content"]
    assert (result.status, result.verdict, result.score) == ("ok", "fail", 0.25)  # the verdict stands
    cause = result.details["root_cause"]
    assert cause["text_source"] == "computed" and cause["span_id"] == "root"
    assert cause["reason"] == "agent span \u201cinvoke_agent desk\u201d of `desk`"
    assert result.details["text_source"] == "computed"
    assert any("occurs in no span it cites" in r for r in result.details["ungrounded"])


def test_a_grounded_root_cause_quote_is_kept_unchanged(fake_llm):
    reason = 'The agent answered "Done." without refunding invoice INV-7.'
    fake_llm.script(default=_trace_reply(reason))
    [result] = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm, step_judges=False))
    assert fake_llm.call_count == 1
    assert result.details["root_cause"]["reason"] == reason and result.details["text_source"] == "model"


def _step_issues_reply(*titles: str):
    """Every step failed with one issue per title (the trace judge answers as usual)."""
    def reply(request):
        if judge_of(request) != "llm.step":
            return judge_reply(request, score=0.25)
        steps = [{"span_id": s["span_id"], "critique": "The step looked up the wrong invoice.", "score": 0.25,
                  "verdict": "fail", "issues": [{"title": title, "detail": "d", "severity": "high", "evidence": []}
                                                for title in titles]}
                 for s in data_block(request)["steps"]]
        return json.dumps({"steps": steps})
    return reply


def test_a_step_issue_naming_an_absent_tool_is_asked_again_then_dropped(fake_llm):
    fake_llm.script(default=_step_issues_reply("`refund_tool` was never called", "`invoice_lookup` got INV-8"))
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm, trace_judge=False))
    assert fake_llm.call_count == 2
    for result in results:
        assert (result.status, result.verdict) == ("ok", "fail")
        assert [issue.title for issue in result.issues] == ["`invoice_lookup` got INV-8"]  # the grounded one kept
        assert result.critique == "The step looked up the wrong invoice."
        assert result.details["text_source"] == "computed"
        assert any("refund_tool" in reason for reason in result.details["ungrounded"])


@pytest.mark.django_db
def test_the_insight_api_says_the_text_is_computed_and_why(project, issued_key):
    from diagnosis.models import Insight

    insight = Insight.objects.create(project=project, level="node", node="billing", title="t",
                                     naming_source="offline",
                                     naming_note="$.title: not grounded: names \u201cLambda\u201d")
    body = Client().get(f"/api/v1/insights/{insight.pk}/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").json()
    assert body["text_source"] == "computed" and "Lambda" in body["text_source_reason"]
    Insight.objects.filter(pk=insight.pk).update(naming_source="llm")
    body = Client().get(f"/api/v1/insights/{insight.pk}/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").json()
    assert (body["text_source"], body["text_source_reason"]) == ("model", "")


@pytest.mark.django_db
def test_a_build_whose_names_are_not_grounded_shows_the_computed_text_with_the_reason(project, configured, settings,
                                                                                        issued_key):
    from diagnosis.models import Insight
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from tests.diagnosis.support import support_desk_ingest

    settings.CLEAR_JUDGE_MODEL = MODEL
    support_desk_ingest(project=project, bugs="all")  # 22 tasks: the rule judges find the planted bugs
    configured.script(default=json.dumps({**GROUNDED, "title": "The Lambda agent's router service drops requests"}))
    from diagnosis.services.insights import insights_build

    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, judges=["rules"], enqueue=False))
    assert run.status == "succeeded"
    summary = insights_build(run=run)
    assert summary["naming"]["replaced"] > 0 and summary["naming"]["failed"] == 0, (summary, configured.call_count)

    insights = Insight.objects.filter(project=project, is_other=False)
    assert insights.exists()
    for insight in insights:
        assert "Lambda" not in insight.title and insight.naming_source == "offline"
        assert "names \u201cLambda\u201d" in insight.naming_note
    body = Client().get(f"/api/v1/insights/{insights[0].pk}/",
                        HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").json()
    assert body["text_source"] == "computed" and "not grounded" in body["text_source_reason"]


@pytest.mark.django_db
def test_the_insight_page_notes_a_computed_text_and_why(project, owner):
    from diagnosis.models import Insight
    from tests.frontend.conftest import client_for

    insight = Insight.objects.create(project=project, level="node", node="billing", title="t",
                                     naming_source="offline",
                                     naming_note="$.title: not grounded: names \u201cLambda\u201d")
    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert 'data-testid="insight-text-source"' in page and "names \u201cLambda\u201d" in page
    Insight.objects.filter(pk=insight.pk).update(naming_source="llm")
    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert 'data-testid="insight-text-source"' not in page
    Insight.objects.filter(pk=insight.pk).update(naming_source="offline", naming_note="")  # no model: nothing rejected
    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert 'data-testid="insight-text-source"' not in page


@pytest.mark.parametrize("title, reason", [
    ("The chat is over.", "names no failure"),  # SmolLM2-135M on tau-airline: an issue that says nothing went wrong
    ("Refund the duplicate charge on invoice INV-7 and tell the customer", "restates the task"),
])
def test_a_step_issue_title_naming_no_failure_or_restating_the_task_is_asked_again_then_dropped(fake_llm, title,
                                                                                                  reason):
    fake_llm.script(default=_step_issues_reply(title, "Wrong invoice looked up: INV-8"))
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm, trace_judge=False))
    assert fake_llm.call_count == 2
    assert reason in fake_llm.requests[1]["messages"][-1]["content"]
    for result in results:
        assert [issue.title for issue in result.issues] == ["Wrong invoice looked up: INV-8"]
        assert any(reason in r for r in result.details["ungrounded"])
