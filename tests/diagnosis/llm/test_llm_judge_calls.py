"""LLM judges: retries (through the shared client, tests/clear/test_llm.py), budget, content-hash cache, and the
number of model calls."""

import threading

import pytest

from clear import llm
from diagnosis.judges.llm import LlmJudgeConfig, judge_trace_with_llm
from tests.diagnosis.llm.helpers import judge_of, judge_reply, linear_trace, support_desk_traces

MODEL = "openai/gpt-4o-mini"


def config(fake_llm, **overrides) -> LlmJudgeConfig:
    return LlmJudgeConfig(model=MODEL, api_base=fake_llm.api_base, api_key="test-key", **overrides)


@pytest.fixture
def waits(monkeypatch):
    """Records the back-off waits instead of sleeping."""
    recorded: list[float] = []
    monkeypatch.setattr(llm, "sleep", recorded.append)
    return recorded


def trace_only(fake_llm, **overrides):
    return judge_trace_with_llm(trace=linear_trace(2), rubrics=[],
                                config=config(fake_llm, step_judges=False, **overrides))


def test_429_is_retried_by_the_shared_client_and_counted(fake_llm, waits):
    fake_llm.script({"status": 429, "headers": {"Retry-After": "7"}}, default=judge_reply)
    [result] = trace_only(fake_llm)

    assert fake_llm.call_count == 2
    assert waits == [7.0]
    assert result.status == "ok" and result.details["calls"] == 2


def test_spent_retries_make_an_error_result_never_a_score(fake_llm, waits):
    fake_llm.script(default={"status": 429, "headers": {"retry-after-ms": "10"}})
    [result] = trace_only(fake_llm, max_retries=2)

    assert fake_llm.call_count == 3
    assert waits == [0.01, 0.01]
    assert result.status == "error" and result.score is None and "RateLimitError" in result.error
    assert result.details["cause"] == "rate_limit"


@pytest.mark.parametrize("status", [400, 401, 404])  # 5xx are retried: tests/diagnosis/llm/test_llm_judge_limits.py
def test_other_errors_fail_at_once(fake_llm, waits, status):
    fake_llm.script(default={"status": status})
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[{"id": "r", "text": "t"}], config=config(fake_llm))

    assert fake_llm.call_count == 2  # the trace call and the step call, each tried once
    assert waits == []
    assert [r.status for r in results] == ["error"] * len(results)
    assert all(r.score is None for r in results)
    assert {r.judge for r in results} == {"llm.trace", "rubric.r", "llm.step"}
    assert {r.details["cause"] for r in results} == {"provider_error"}


class TokenBudget:
    def __init__(self, tokens: int) -> None:
        self.left = tokens
        self.spent: list[tuple[int, float]] = []
        self.lock = threading.Lock()

    def allow(self, tokens_estimate: int) -> bool:
        with self.lock:
            return self.left >= tokens_estimate

    def spend(self, tokens: int, cost: float) -> None:
        with self.lock:
            self.left -= tokens
            self.spent.append((tokens, cost))


def test_budget_stops_the_calls_with_skipped_results(fake_llm):
    fake_llm.script(default=judge_reply)
    budget = TokenBudget(7000)
    trace = linear_trace(20)  # the trace call asks for ≈ 5k tokens; the step call then no longer fits
    results = judge_trace_with_llm(trace=trace, rubrics=[{"id": "r", "text": "t"}],
                                   config=config(fake_llm, budget=budget))

    assert fake_llm.call_count == 1
    assert [judge_of(r) for r in fake_llm.requests] == ["llm.trace"]
    assert budget.spent and budget.spent[0][0] > 0 and budget.spent[0][1] > 0
    steps = [r for r in results if r.judge == "llm.step"]
    assert len(steps) == 20
    assert all(r.status == "skipped" and r.error == "budget exhausted" and r.score is None for r in steps)
    assert {r.status for r in results if r.judge != "llm.step"} == {"ok"}


def test_an_exhausted_budget_makes_no_call(fake_llm):
    fake_llm.script(default=judge_reply)
    budget = TokenBudget(0)
    results = judge_trace_with_llm(trace=linear_trace(3), rubrics=[{"id": "r", "text": "t"}],
                                   config=config(fake_llm, budget=budget, generated_rubrics=True))

    assert fake_llm.call_count == 0
    assert results and {(r.status, r.error) for r in results} == {("skipped", "budget exhausted")}


def test_identical_second_run_makes_zero_model_calls(fake_llm):
    fake_llm.script(default=judge_reply)
    store: dict[str, dict] = {}
    trace = support_desk_traces(task_ids=["refund-status"])[0]
    rubrics = [{"id": "r", "name": "n", "text": "t"}]
    cfg = config(fake_llm, cache_get=store.get, cache_put=store.__setitem__, generated_rubrics=True,
                 max_context_tokens=3000)  # several windows, so the running summary goes through the cache too
    first = judge_trace_with_llm(trace=trace, rubrics=rubrics, config=cfg)
    calls = fake_llm.call_count
    assert calls >= 4 and len(store) == calls

    second = judge_trace_with_llm(trace=trace, rubrics=rubrics, config=cfg)
    assert fake_llm.call_count == calls  # no new request
    assert [(r.judge, r.target_span_id, r.score, r.verdict, r.critique) for r in second] == \
        [(r.judge, r.target_span_id, r.score, r.verdict, r.critique) for r in first]
    assert all(r.cost == 0 and r.input_tokens == 0 for r in second)
    assert all(r.details.get("cache_hit") for r in second if r.judge in ("llm.step", "llm.trace"))
    assert [r.cache_key for r in second] == [r.cache_key for r in first]

    changed = config(fake_llm, cache_get=store.get, cache_put=store.__setitem__, generated_rubrics=True,
                     max_context_tokens=3000)
    changed.model = "openai/gpt-4o"  # the model is part of the key
    judge_trace_with_llm(trace=trace, rubrics=rubrics, config=changed)
    assert fake_llm.call_count == 2 * calls


def test_call_count_for_a_30_step_trace_in_the_default_configuration(fake_llm):
    fake_llm.script(default=judge_reply)
    trace = linear_trace(30, text_chars=400)
    results = judge_trace_with_llm(trace=trace, rubrics=[{"id": "r", "text": "t"}],
                                   config=config(fake_llm))

    steps = [r for r in results if r.judge == "llm.step"]
    assert len(steps) == 30 and all(r.status == "ok" for r in results)
    assert fake_llm.call_count <= 1.2 * len(steps) + 2
    assert fake_llm.call_count == 3  # 2 batched step calls (16 steps max each) + 1 trace call


def test_a_broken_cache_is_a_miss_and_a_judge_crash_is_an_error_result(fake_llm, monkeypatch):
    fake_llm.script(default=judge_reply)

    def broken(*args, **kwargs):
        raise ConnectionError("cache down")

    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[],
                                   config=config(fake_llm, cache_get=broken, cache_put=broken))
    assert {r.status for r in results} == {"ok"}
    assert "cache read failed: ConnectionError" in results[0].details["notes"]

    from diagnosis.judges.llm import step

    monkeypatch.setattr(step, "pack", broken)
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=config(fake_llm))
    steps = [r for r in results if r.judge == "llm.step"]
    assert len(steps) == 2 and all(r.status == "error" and r.score is None for r in steps)
    assert "judge crashed: ConnectionError" in steps[0].error


def test_an_exception_from_the_budget_propagates(fake_llm):
    class Cancelled(Exception):
        pass

    class CancellingBudget:
        def allow(self, tokens_estimate):
            raise Cancelled()

        def spend(self, tokens, cost):
            pass

    fake_llm.script(default=judge_reply)
    for overrides in ({}, {"trace_judge": False}):
        with pytest.raises(Cancelled):
            judge_trace_with_llm(trace=linear_trace(2), rubrics=[],
                                 config=config(fake_llm, budget=CancellingBudget(), **overrides))
    assert fake_llm.call_count == 0
