"""Issue 43.2: generated rubrics are grounded in what they were written from (the goal and the trace's agent and
tool names). A rubric naming a tool the trace does not have, or quoting a value the goal does not hold, is asked for
once more with the reason, then dropped with the reason; grounded rubrics are kept unchanged (fake server)."""

import json

from diagnosis.judges.llm import LlmJudgeConfig, judge_trace_with_llm
from tests.diagnosis.llm.helpers import data_block, judge_of, judge_reply, linear_trace

MODEL = "openai/gpt-4o-mini"
GROUNDED = [
    {"name": "Looks the invoice up", "text": "invoice_lookup is called with the invoice id INV-7 before any refund."},
    {"name": "Refunds once", "text": "The billing agent refunds the duplicate charge on \"INV-7\" once."},
    {"name": "Tells the customer", "text": "The final answer tells the customer whether the refund was made."},
]
ABSENT_TOOL = {"name": "Uses the refund tool", "text": "`refund_tool` is called with the amount of the charge."}
ABSENT_QUOTE = {"name": "States the amount", "text": "The answer says \"refund of $500 approved\"."}


def _config(fake_llm) -> LlmJudgeConfig:
    return LlmJudgeConfig(model=MODEL, api_base=fake_llm.api_base, api_key="test-key", step_judges=False,
                          generated_rubrics=True)


def _script(fake_llm, rubrics: list[dict]) -> None:
    def reply(request):
        if judge_of(request) == "llm.rubric_gen":
            return json.dumps({"rubrics": rubrics})
        return judge_reply(request, score=0.25)

    fake_llm.script(default=reply)


def _generation_requests(fake_llm) -> list[dict]:
    return [r for r in fake_llm.requests if judge_of(r) == "llm.rubric_gen"]


def test_the_generator_is_shown_the_trace_agents_and_tools(fake_llm):
    _script(fake_llm, GROUNDED)
    judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm))
    [request] = _generation_requests(fake_llm)
    data = data_block(request)
    assert (data["agents"], data["tools"]) == (["billing", "desk"], ["invoice_lookup"])


def test_grounded_generated_rubrics_are_kept_unchanged(fake_llm):
    _script(fake_llm, GROUNDED)
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm))

    assert len(_generation_requests(fake_llm)) == 1  # not asked again
    generated = [r for r in results if r.judge.startswith("rubric.gen-")]
    assert [(r.details["rubric"]["name"], r.details["rubric"]["text"]) for r in generated] == [
        (g["name"], g["text"]) for g in GROUNDED]
    assert all(r.details["text_source"] == "model" for r in generated)
    assert not [r for r in results if r.judge == "rubric.generated"]


def test_a_rubric_naming_an_absent_tool_or_quoting_an_absent_value_is_asked_again_then_dropped(fake_llm):
    _script(fake_llm, [GROUNDED[0], ABSENT_TOOL, GROUNDED[2], ABSENT_QUOTE])
    results = judge_trace_with_llm(trace=linear_trace(2), rubrics=[], config=_config(fake_llm))

    first, second = _generation_requests(fake_llm)
    repair = second["messages"][-1]["content"]
    assert "refund_tool" in repair and "refund of $500 approved" in repair and "not grounded" in repair
    trace_request = next(r for r in fake_llm.requests if judge_of(r) == "llm.trace")
    assert [r["name"] for r in data_block(trace_request)["rubrics"]] == [GROUNDED[0]["name"], GROUNDED[2]["name"]]

    generated = [r for r in results if r.judge.startswith("rubric.gen-")]
    assert [r.details["rubric"]["text"] for r in generated] == [GROUNDED[0]["text"], GROUNDED[2]["text"]]
    [note] = [r for r in results if r.judge == "rubric.generated"]
    assert note.status == "skipped" and "2 of 4 generated rubrics" in note.error  # a skip: not a judge failure
    assert note.details["dropped"] == [ABSENT_TOOL["name"], ABSENT_QUOTE["name"]]
    reasons = " ".join(note.details["ungrounded"])
    assert "\u201crefund_tool\u201d" in reasons and "refund of $500 approved" in reasons
    trace_result = next(r for r in results if r.judge == "llm.trace")
    assert (trace_result.status, trace_result.verdict) == ("ok", "fail")  # the judging goes on with the kept ones
