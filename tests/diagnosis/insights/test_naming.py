"""The LLM namer of insights through the shared client and the fake OpenAI-compatible server: a valid name, the one
repair request, the judge cache, failures that keep the offline name and the circuit breaker."""

import json
from types import SimpleNamespace

import pytest

from clear import llm
from diagnosis.insights.naming import MAX_FAILURES, NAMING_SYSTEM, NamingUsage, llm_namer_build

pytestmark = pytest.mark.django_db

MODEL = "openai/gpt-4o-mini"
NAME = {"title": "Refunds promised without a lookup", "description": "The writer promises refunds.",
        "root_cause": "The writer prompt has no rule.", "recommendation": "Add the rule."}


@pytest.fixture
def configured(settings, fake_llm, monkeypatch):
    settings.CLEAR_JUDGE_API_BASE = fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    monkeypatch.setattr(llm, "sleep", lambda seconds: None)
    return fake_llm


def request(cluster_id: str = "c1", medoid: str = "The writer promised a refund without checking."):
    cluster = SimpleNamespace(id=cluster_id, level="node", node="writer", size=4, trace_ids=["t1", "t2"],
                              nodes={"writer": 4})
    return SimpleNamespace(cluster=cluster, medoid_text=medoid, example_texts=[medoid], terms=["refund"])


def test_a_valid_reply_names_the_cluster_and_is_cached(configured):
    configured.script(json.dumps(NAME))
    usage = NamingUsage()
    name = llm_namer_build(model=MODEL, usage=usage)(request())

    assert name.source == "llm" and name.title == NAME["title"] and name.recommendation == "Add the rule."
    assert configured.requests[0]["messages"][0]["content"] == NAMING_SYSTEM
    assert (usage.calls, usage.failed, usage.cached) == (1, 0, 0) and usage.input_tokens > 0

    configured.script()  # nothing scripted: a request would fail
    again = NamingUsage()
    assert llm_namer_build(model=MODEL, usage=again)(request()).title == NAME["title"]
    assert configured.call_count == 0 and (again.calls, again.cached) == (0, 1)


def test_an_invalid_reply_gets_one_repair(configured):
    configured.script('{"title": "x"}', json.dumps(NAME))
    usage = NamingUsage()
    name = llm_namer_build(model=MODEL, usage=usage)(request())

    assert name.title == NAME["title"] and usage.calls == 2 and usage.failed == 0
    assert "root_cause" in configured.requests[1]["messages"][-1]["content"]


def test_failures_keep_the_offline_name_and_stop_asking_after_a_streak(configured):
    configured.script(default={"status": 400})
    usage = NamingUsage()
    namer = llm_namer_build(model=MODEL, usage=usage)
    names = [namer(request(f"c{i}", medoid=f"statement {i}")) for i in range(MAX_FAILURES + 2)]

    assert names == [None] * (MAX_FAILURES + 2)
    assert configured.call_count == MAX_FAILURES  # the breaker stops the calls, 400s are not retried
    assert usage.failed == usage.streak == MAX_FAILURES
    assert usage.errors and usage.errors[0].startswith("BadRequestError")


def test_a_429_is_retried_once(configured):
    configured.script({"status": 429}, {"status": 429}, default=json.dumps(NAME))
    usage = NamingUsage()
    assert llm_namer_build(model=MODEL, usage=usage)(request()) is None
    assert configured.call_count == 2 and usage.failed == 1 and "RateLimitError" in usage.errors[0]


def test_no_model_no_namer():
    assert llm_namer_build(model="", usage=NamingUsage()) is None
