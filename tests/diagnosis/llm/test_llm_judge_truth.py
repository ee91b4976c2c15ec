"""Issue 43: a schema-valid reply is not a true one. Replies that copy the prompt (echo) or contradict themselves
(a fail verdict with score 1.0) are asked again once with the reason, then recorded as invalid output, never a
verdict; replies that say something of their own are kept unchanged (fake OpenAI-compatible server)."""

import json

from diagnosis.judges.llm import SYSTEM_PROMPTS, LlmJudgeConfig, judge_trace_with_llm
from clear.text_echo import ECHO_SIMILARITY, echo_of
from diagnosis.judges.llm.prompts import STEP_EXAMPLE
from diagnosis.judges.llm.reply_checks import judge_reference
from tests.diagnosis.llm.helpers import data_block, judge_of, judge_reply, linear_trace

MODEL = "openai/gpt-4o-mini"

ECHO_ISSUE = {"title": "short label of one problem", "detail": "what went wrong and why it matters",
              "severity": "medium", "evidence": []}


def config(fake_llm, **overrides) -> LlmJudgeConfig:
    return LlmJudgeConfig(model=MODEL, api_base=fake_llm.api_base, api_key="test-key", **overrides)


def steps_reply(request, *, issue=None, score=0.25, verdict="fail", critique="Looked up INV-8 instead of INV-7.",
                only=None):
    steps = []
    for s in data_block(request)["steps"]:
        bad = only is None or s["span_id"] in only
        steps.append({"span_id": s["span_id"], "critique": critique if bad else "Looked up the invoice.",
                      "score": score if bad else 0.25, "verdict": verdict if bad else "fail",
                      "issues": [issue if (bad and issue) else {"title": "Wrong invoice looked up",
                                                                "detail": "INV-8 instead of INV-7", "severity": "high",
                                                                "evidence": []}]})
    return json.dumps({"steps": steps})


def test_prompts_show_an_example_not_descriptions():
    for judge, prompt in SYSTEM_PROMPTS.items():
        assert "An example reply" in prompt, judge
        assert "short label of one problem" not in prompt and "what went wrong and why it matters" not in prompt
        assert "4-8 sentences:" not in prompt
    # the example itself is part of what a reply must not copy
    title = STEP_EXAMPLE["steps"][0]["issues"][0]["title"]
    assert echo_of(text=title, reference=judge_reference("llm.step"))[1] >= ECHO_SIMILARITY


def test_a_reply_copying_the_template_descriptions_is_invalid_output_echo(fake_llm):
    fake_llm.script(default=lambda request: steps_reply(request, issue=ECHO_ISSUE))
    results = judge_trace_with_llm(trace=linear_trace(3), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2  # asked once more, with the reason
    repair = fake_llm.requests[1]["messages"][-1]["content"]
    assert "copies the prompt" in repair and "short label of one problem" in repair
    assert len(results) == 4
    for result in results:
        assert (result.status, result.score, result.verdict, result.issues) == ("error", None, None, [])
        assert result.details["cause"] == "invalid_output:echo"
        assert "copies the prompt" in result.error


def test_an_echo_fixed_on_the_repair_is_kept_and_only_the_echoing_step_is_refused(fake_llm):
    fake_llm.script(lambda request: steps_reply(request, issue=ECHO_ISSUE),
                    lambda request: steps_reply(request, issue=ECHO_ISSUE, only={"s001"}))
    results = judge_trace_with_llm(trace=linear_trace(3), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2
    by_span = {r.target_span_id: r for r in results}
    assert by_span["s001"].status == "error" and by_span["s001"].details["cause"] == "invalid_output:echo"
    for sid in ("root", "s000", "s002"):
        kept = by_span[sid]
        assert (kept.status, kept.verdict, kept.score) == ("ok", "fail", 0.25)
        assert kept.issues[0].title == "Wrong invoice looked up"  # grounded texts are kept unchanged
        assert kept.critique == "Looked up the invoice."


def test_a_fail_verdict_with_score_one_is_asked_again_then_recorded_as_inconsistent(fake_llm):
    fake_llm.script(default=lambda request: steps_reply(request, score=1.0, verdict="fail"))
    results = judge_trace_with_llm(trace=linear_trace(1), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2
    assert "contradicts its score" in fake_llm.requests[1]["messages"][-1]["content"]
    for result in results:
        assert (result.status, result.score, result.verdict) == ("error", None, None)
        assert result.details["cause"] == "invalid_output:inconsistent"


def test_a_contradiction_corrected_on_the_repair_is_kept(fake_llm):
    fake_llm.script(lambda request: steps_reply(request, score=0.2, verdict="pass"),
                    lambda request: steps_reply(request, score=0.2, verdict="fail"))
    results = judge_trace_with_llm(trace=linear_trace(1), rubrics=[], config=config(fake_llm, trace_judge=False))
    assert {(r.status, r.verdict, r.score) for r in results} == {("ok", "fail", 0.2)}
    assert all(r.details["repaired"] for r in results)


def trace_reply_saying(feedback: str):
    """A failing trace verdict whose feedback is `feedback`."""
    def reply(request):
        value = json.loads(judge_reply(request, score=0.25))
        value["feedback"] = feedback
        return json.dumps(value)
    return reply


def test_a_trace_feedback_copying_the_template_is_echo_and_its_rubrics_get_no_verdict(fake_llm):
    fake_llm.script(default=trace_reply_saying("4-8 sentences: what the agent did, what went wrong, why"))
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[{"id": "r1", "name": "n", "text": "t"}],
                                   config=config(fake_llm, step_judges=False))
    assert fake_llm.call_count == 2
    assert {(r.judge, r.status, r.details.get("cause")) for r in results} == {
        ("llm.trace", "error", "invalid_output:echo"), ("rubric.r1", "error", "invalid_output:echo")}


def test_a_trace_verdict_contradicting_its_score_is_inconsistent(fake_llm):
    def reply(request):
        value = json.loads(judge_reply(request, score=1.0))  # a failing trace: verdict "fail" with score 1.0
        return json.dumps(value)

    fake_llm.script(default=reply)
    [trace_result] = judge_trace_with_llm(trace=linear_trace(2), rubrics=[],
                                          config=config(fake_llm, step_judges=False))
    assert fake_llm.call_count == 2
    assert (trace_result.status, trace_result.score) == ("error", None)
    assert trace_result.details["cause"] == "invalid_output:inconsistent"


def test_generated_rubrics_copying_the_example_are_echo(fake_llm):
    from diagnosis.judges.llm.prompts import RUBRIC_GEN_EXAMPLE

    def reply(request):
        if judge_of(request) == "llm.rubric_gen":
            return json.dumps(RUBRIC_GEN_EXAMPLE)
        return judge_reply(request, score=0.25)

    fake_llm.script(default=reply)
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[],
                                   config=config(fake_llm, step_judges=False, generated_rubrics=True))
    generated = [r for r in results if r.judge == "rubric.generated"]
    assert [(r.status, r.details["cause"]) for r in generated] == [("error", "invalid_output:echo")]
    assert not [r for r in results if r.judge.startswith("rubric.gen-")]


def test_an_echo_beside_an_ungrounded_text_is_still_an_echo(fake_llm):
    def reply(request):  # the feedback copies the template, the root cause names a tool the trace does not have
        value = json.loads(judge_reply(request, score=0.25))
        value["feedback"] = "4-8 sentences: what the agent did, what went wrong, why"
        value["root_cause"]["reason"] = "`refund_tool` was never called."
        return json.dumps(value)

    fake_llm.script(default=reply)
    [trace_result] = judge_trace_with_llm(trace=linear_trace(2), rubrics=[],
                                          config=config(fake_llm, step_judges=False))
    assert fake_llm.call_count == 2
    assert (trace_result.status, trace_result.details["cause"]) == ("error", "invalid_output:echo")


REFUSAL = "I'm sorry, but I can't assist with that request."


def test_a_critique_that_refuses_is_asked_again_then_recorded_as_refusal(fake_llm):
    """The model answered as the assistant instead of judging (seen with a real local model, closing note of issue
    43): schema-valid, no echo, and shown as the step's critique. Now it is no verdict and no statement."""
    fake_llm.script(default=lambda request: steps_reply(request, critique=REFUSAL))
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=config(fake_llm, trace_judge=False))

    assert fake_llm.call_count == 2
    assert "is a refusal" in fake_llm.requests[1]["messages"][-1]["content"]
    for result in results:
        assert (result.status, result.verdict, result.issues) == ("error", None, [])
        assert result.details["cause"] == "invalid_output:refusal"


def test_a_trace_feedback_that_refuses_is_refusal_and_a_critique_quoting_the_agents_refusal_is_kept(fake_llm):
    fake_llm.script(default=trace_reply_saying("As an AI language model, I cannot evaluate this conversation."))
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=config(fake_llm, step_judges=False))
    assert {(r.judge, r.status, r.details.get("cause")) for r in results} == {
        ("llm.trace", "error", "invalid_output:refusal")}

    quoted = "Answered I'm sorry, I can't help with this instead of refunding the duplicate charge on INV-7."
    fake_llm.script(default=lambda request: steps_reply(request, critique=quoted))
    kept = judge_trace_with_llm(trace=linear_trace(1), rubrics=[], config=config(fake_llm, trace_judge=False))
    assert fake_llm.call_count == 1 and {(r.status, r.critique) for r in kept} == {("ok", quoted)}


def test_refusals_are_told_from_findings():
    from clear.text_refusal import is_refusal

    for text in (REFUSAL, "I cannot help with that.", "Sorry, I can't do that.", "I am unable to evaluate the steps",
                 "As an AI, I have no opinion.", "I apologize, but I won't answer this."):
        assert is_refusal(text), text
    for text in ("The agent said it cannot assist and stopped.", "Refused the refund although the order was late.",
                 "I/O error on the invoice lookup.", "Sorry state of the order: it was never shipped."):
        assert not is_refusal(text), text
