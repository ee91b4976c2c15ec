"""LLM judges: structured output, repair, evidence filtering, cost accounting, rubrics (fake OpenAI server)."""

import json

import pytest

from diagnosis.judges.llm import PROMPT_VERSIONS, SYSTEM_PROMPTS, LlmJudgeConfig, judge_trace_with_llm
from tests.diagnosis.llm.helpers import data_block, judge_of, judge_reply, linear_trace, span, support_desk_traces
from diagnosis.judges.contract import TraceView

MODEL = "openai/gpt-4o-mini"


def config(fake_llm, **overrides) -> LlmJudgeConfig:
    return LlmJudgeConfig(model=MODEL, api_base=fake_llm.api_base, api_key="test-key", **overrides)


def by_judge(results, judge):
    return [r for r in results if r.judge == judge]


def test_structured_output_is_parsed_into_results(fake_llm):
    trace = linear_trace(4)

    def reply(request):
        if judge_of(request) != "llm.step":
            return judge_reply(request, score=0.25)
        steps = [{"span_id": s["span_id"], "critique": "Looked up the wrong invoice.", "score": 0.25, "verdict": "fail",
                  "issues": [{"title": "Wrong invoice", "detail": "INV-8 instead of INV-7", "severity": "high",
                              "evidence": [{"span_id": s["span_id"], "quote": "step"},
                                           {"span_id": "no-such-span", "quote": "made up"}]}]}
                 for s in data_block(request)["steps"]]
        return json.dumps({"steps": steps})

    fake_llm.script(default=reply)
    results = judge_trace_with_llm(trace=trace, rubrics=[{"id": "r1", "name": "Refund", "text": "Refunds INV-7"}],
                                   config=config(fake_llm))

    assert fake_llm.call_count == 2  # one batched step call, one trace call
    # LiteLLM says gpt-4o-mini supports response schemas: structured output "auto" sends each judge's schema
    assert sorted(r["response_format"]["json_schema"]["name"] for r in fake_llm.requests) == ["llm_step", "llm_trace"]
    steps = by_judge(results, "llm.step")
    assert [r.target_span_id for r in steps] == ["s000", "s001", "s002", "s003"]  # the root AGENT is the trace's
    first = steps[0]
    assert (first.status, first.score, first.verdict) == ("ok", 0.25, "fail")
    assert first.critique == "Looked up the wrong invoice."
    assert first.issues[0].title == "Wrong invoice" and first.issues[0].severity == "high"
    assert [e.span_id for e in first.issues[0].evidence] == ["s000"]
    assert first.details["dropped_unknown_span_evidence"] == 1
    assert first.model == MODEL and first.prompt_version == PROMPT_VERSIONS["llm.step"]
    assert first.input_tokens > 0 and first.output_tokens > 0 and first.cost > 0 and first.latency_ms > 0

    [trace_result] = by_judge(results, "llm.trace")
    assert (trace_result.status, trace_result.score, trace_result.verdict) == ("ok", 0.25, "fail")
    assert trace_result.target_span_id is None
    assert set(trace_result.details["dimensions"]) == {
        "task_completion", "correctness", "tool_use", "efficiency", "coordination"}
    assert trace_result.details["root_cause"] == {"node": "n", "span_id": "root", "reason": "r"}
    assert trace_result.details["windows"] == 1
    [rubric] = by_judge(results, "rubric.r1")
    assert (rubric.status, rubric.score, rubric.verdict) == ("ok", 1.0, "pass")
    assert rubric.details["rubric"]["text"] == "Refunds INV-7"


def test_malformed_output_gets_one_repair_then_error_never_a_zero_score(fake_llm):
    fake_llm.script("this is not JSON", '{"steps": "still wrong"}', default="never reached")
    results = judge_trace_with_llm(trace=linear_trace(3), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2  # the call and exactly one repair
    repair = fake_llm.requests[1]["messages"]
    assert repair[:2] == fake_llm.requests[0]["messages"]
    assert repair[2] == {"role": "assistant", "content": "this is not JSON"}
    assert "not valid JSON" in repair[3]["content"]
    assert len(results) == 4  # without the trace judge the root AGENT span is a step too
    for result in results:
        assert result.status == "error"
        assert result.score is None and result.verdict is None
        assert "invalid judge output after one repair" in result.error and "$.steps" in result.error
        assert result.input_tokens > 0  # the failed calls still cost something


def test_repaired_output_is_used(fake_llm):
    fake_llm.script('{"steps": []}', default=judge_reply)
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2
    assert 'no verdict for span_id(s) ["root","s000","s001"]' in fake_llm.requests[1]["messages"][-1]["content"]
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert all(r.details["repaired"] for r in results)


def test_a_step_still_missing_after_repair_is_an_error_the_others_are_kept(fake_llm):
    def without_last(request):
        reply = json.loads(judge_reply(request))
        reply["steps"] = reply["steps"][:-1]
        return json.dumps(reply)

    fake_llm.script(default=without_last)
    results = judge_trace_with_llm(trace=linear_trace(3), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2
    assert [r.status for r in results] == ["ok", "ok", "ok", "error"]
    assert results[3].score is None and "no verdict" in results[3].error


def test_trace_judge_must_name_a_root_cause_for_a_failed_trace(fake_llm):
    def no_cause(request):
        reply = json.loads(judge_reply(request))
        reply["root_cause"] = None
        return json.dumps(reply)

    def unknown_span(request):
        reply = json.loads(judge_reply(request))
        reply["root_cause"]["span_id"] = "not-in-trace"
        return json.dumps(reply)

    fake_llm.script(no_cause, unknown_span, default=judge_reply)
    results = judge_trace_with_llm(trace=linear_trace(2, outcome="failure"), rubrics=[],
                                   config=config(fake_llm, step_judges=False))

    assert fake_llm.call_count == 2
    assert "$.root_cause: required" in fake_llm.requests[1]["messages"][-1]["content"]
    [result] = results
    assert result.status == "error" and result.score is None
    assert "root_cause.span_id" in result.error


def test_rubrics_are_checked_in_the_trace_call_and_generated_ones_too(fake_llm):
    fake_llm.script(default=judge_reply)
    rubrics = [{"id": 7, "name": "Polite", "text": "Greets the customer", "node": "writer"},
               {"id": "tone", "name": "Tone", "text": "No internal error codes"}]
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=rubrics,
                                   config=config(fake_llm, step_judges=False, generated_rubrics=True))

    assert [judge_of(r) for r in fake_llm.requests] == ["llm.rubric_gen", "llm.trace"]
    sent = data_block(fake_llm.requests[1])["rubrics"]
    assert [r["id"] for r in sent] == ["7", "tone", "gen-1", "gen-2", "gen-3"]
    assert sent[0]["node"] == "writer"
    judges = [r.judge for r in results]
    assert judges == ["llm.trace", "rubric.7", "rubric.tone", "rubric.gen-1", "rubric.gen-2", "rubric.gen-3"]
    generated = by_judge(results, "rubric.gen-1")[0]
    assert generated.details["generated"] is True and generated.input_tokens > 0
    assert generated.prompt_version == "trace-v2+rubric-gen-v3"


def test_cost_uses_the_price_table_and_splits_a_batch_exactly(fake_llm):
    fake_llm.script(default=lambda req: {"content": judge_reply(req),
                                         "usage": {"prompt_tokens": 1001, "completion_tokens": 99}})
    results = judge_trace_with_llm(
        trace=linear_trace(5), rubrics=[],
        config=config(fake_llm, trace_judge=False, price_overrides={MODEL: (1e-6, 1e-5)}))

    assert sum(r.input_tokens for r in results) == 1001
    assert sum(r.output_tokens for r in results) == 99
    assert sum(r.cost for r in results) == pytest.approx(1001 * 1e-6 + 99 * 1e-5)
    assert results[0].details["call_cost"] == pytest.approx(1001 * 1e-6 + 99 * 1e-5)
    assert results[0].details["batch_size"] == 6


def test_litellm_price_table_and_unknown_models(fake_llm):
    fake_llm.script(default=lambda req: {"content": judge_reply(req),
                                         "usage": {"prompt_tokens": 1000, "completion_tokens": 100}})
    [known] = judge_trace_with_llm(trace=linear_trace(1), rubrics=[], config=config(fake_llm, step_judges=False))
    assert known.cost == pytest.approx(1000 * 1.5e-07 + 100 * 6e-07)  # gpt-4o-mini in LiteLLM's local cost map

    unknown_config = config(fake_llm, step_judges=False)
    unknown_config.model = "openai/clear-test-model-without-a-price"
    [unknown] = judge_trace_with_llm(trace=linear_trace(1), rubrics=[], config=unknown_config)
    assert unknown.status == "ok" and unknown.cost == 0.0 and unknown.input_tokens == 1000
    assert "no price known" in unknown.details["notes"][0]


def test_support_desk_traces_get_one_result_per_judged_span(fake_llm):
    fake_llm.script(default=judge_reply)
    trace = next(t for t in support_desk_traces(task_ids=["compare-two-invoices"]))
    results = judge_trace_with_llm(trace=trace, rubrics=[], config=config(fake_llm))

    judged = {s.span_id for s in trace.spans if s.kind in ("LLM", "TOOL", "AGENT") and s.parent_span_id}
    assert {r.target_span_id for r in by_judge(results, "llm.step")} == judged
    assert all(r.status == "ok" for r in results)
    assert fake_llm.call_count == 2


def test_conversation_history_is_not_resent(fake_llm):
    """The second LLM call of a worker shows only its new messages; the first one's are marked as omitted."""
    fake_llm.script(default=judge_reply)
    trace = support_desk_traces(task_ids=["compare-two-invoices"])[0]
    judge_trace_with_llm(trace=trace, rubrics=[], config=config(fake_llm, trace_judge=False))

    steps = [s for request in fake_llm.requests for s in data_block(request)["steps"]]
    calls = [s for s in steps if s["kind"] == "LLM" and s["node"] == "billing_worker"]
    assert len(calls) == 2
    first, second = calls
    assert not any("omitted" in m for m in first["input"])
    markers = [m for m in second["input"] if "omitted" in m]
    assert len(markers) == 1 and first["span_id"] in markers[0]["omitted"]
    assert not any(m.get("role") == "user" and "Handle these requests" in json.dumps(m) for m in second["input"])
    assert sum(1 for m in second["input"] if m.get("role") == "tool") >= 1


def test_the_system_message_is_a_constant(fake_llm):
    fake_llm.script(default=judge_reply)
    for trace in (linear_trace(2, trace_id="a"), TraceView(trace_id="b", spans=[span("x", parent="y")], goal="other")):
        judge_trace_with_llm(trace=trace, rubrics=[], config=config(fake_llm))
    systems = {r["messages"][0]["content"] for r in fake_llm.requests}
    assert systems <= set(SYSTEM_PROMPTS.values())


def test_a_trace_without_spans_is_still_judged(fake_llm):
    dimensions = {d: {"score": 0.0, "justification": "none"}
                  for d in ("task_completion", "correctness", "tool_use", "efficiency", "coordination")}
    fake_llm.script(default=json.dumps({
        "feedback": "Nothing happened.", "dimensions": dimensions, "score": 0.0, "verdict": "fail",
        "outcome_assessment": "unclear", "root_cause": None, "issues": [], "rubrics": []}))
    [result] = judge_trace_with_llm(trace=TraceView(trace_id="empty", spans=[], goal="Do it"), rubrics=[],
                                    config=config(fake_llm))
    assert fake_llm.call_count == 1
    assert data_block(fake_llm.requests[0])["steps"] == []
    assert (result.status, result.score, result.verdict) == ("ok", 0.0, "fail")  # a real verdict, not an error
