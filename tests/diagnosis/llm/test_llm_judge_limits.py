"""Bounded and structured model calls of the LLM judges and the insight namer (fake OpenAI server): every request
carries its kind's max_tokens, the schema travels in response_format when structured output is on, transient
failures (a dropped connection, a 500) are retried, a reply cut by the length limit is asked again once with the
limit doubled and otherwise recorded with the cause invalid_output:length, in the result and in the run's errors."""

import json
from types import SimpleNamespace

import pytest

from clear import llm
from clear.llm import schema_bounded
from clear.llm_limits import NAMING_MAX_TOKENS, STEP_JUDGE_MAX_TOKENS, TRACE_JUDGE_MAX_TOKENS, \
    TRACE_JUDGE_TOKENS_PER_RUBRIC
from diagnosis.insights.naming import NAMING_JUDGE, NAMING_SCHEMA, NamingUsage, llm_namer_build
from diagnosis.judges.llm import LlmJudgeConfig, judge_trace_with_llm
from diagnosis.judges.llm.schema import STEP_SCHEMA, TRACE_SCHEMA
from diagnosis.judges.llm.step import step_schema
from diagnosis.judges.llm.trace import trace_schema
from tests.diagnosis.llm.helpers import judge_of, judge_reply, linear_trace

LOCAL_MODEL = "openai/clear-local-model"  # a model LiteLLM does not know, as a local server's would be
RUBRICS = [{"id": "r1", "name": "Refund", "text": "Refunds INV-7"}]


@pytest.fixture
def waits(monkeypatch):
    recorded: list[float] = []
    monkeypatch.setattr(llm, "sleep", recorded.append)
    return recorded


def config(fake_llm, **overrides) -> LlmJudgeConfig:
    return LlmJudgeConfig(**{"model": LOCAL_MODEL, "api_base": fake_llm.api_base, "api_key": "test-key",
                             **overrides})


def judge(fake_llm, **overrides):
    return judge_trace_with_llm(trace=linear_trace(4), rubrics=RUBRICS, config=config(fake_llm, **overrides))


def requests_of(fake_llm, name: str) -> list[dict]:
    return [r for r in fake_llm.requests if judge_of(r) == name]


def test_every_judge_request_carries_its_kinds_max_tokens(fake_llm):
    fake_llm.script(default=judge_reply)
    results = judge(fake_llm)

    assert {r.status for r in results} == {"ok"}
    [step], [trace] = requests_of(fake_llm, "llm.step"), requests_of(fake_llm, "llm.trace")
    assert step["max_tokens"] == STEP_JUDGE_MAX_TOKENS  # four steps: the base size
    assert trace["max_tokens"] == TRACE_JUDGE_MAX_TOKENS + TRACE_JUDGE_TOKENS_PER_RUBRIC * len(RUBRICS)


def test_the_ceiling_caps_every_kind(fake_llm):
    fake_llm.script(default=judge_reply)
    judge(fake_llm, max_tokens=1500)

    assert sorted(r["max_tokens"] for r in fake_llm.requests) == [1024, 1500]


def _assert_trace_decoding(schema: dict) -> None:
    """The trace judge's decoding schema: one entry per rubric in order, a root cause naming one of the spans."""
    spans = sorted(span.span_id for span in linear_trace(4).spans)
    assert schema == schema_bounded(schema=trace_schema(len(RUBRICS), rubric_ids=["r1"], span_ids=spans))
    assert [item["properties"]["id"]["const"] for item in schema["properties"]["rubrics"]["prefixItems"]] == ["r1"]


def _decoded_span_ids(schema: dict) -> list[str]:
    """The batch's span ids the decoding schema allows: exactly the four judged steps of the trace."""
    steps = schema["properties"]["steps"]
    ids = [item["properties"]["span_id"]["const"] for item in steps["prefixItems"]]  # one verdict per step, in order
    assert steps["minItems"] == steps["maxItems"] == 4 and len(set(ids)) == 4
    assert set(ids) <= {span.span_id for span in linear_trace(4).spans}
    return ids


def test_structured_output_on_sends_each_judges_schema(fake_llm):
    fake_llm.script(default=judge_reply)
    judge(fake_llm, structured_output="on")

    [step], [trace] = requests_of(fake_llm, "llm.step"), requests_of(fake_llm, "llm.trace")
    ids = _decoded_span_ids(step["response_format"]["json_schema"]["schema"])
    assert step["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "llm_step", "schema": schema_bounded(schema=step_schema(4, span_ids=ids)), "strict": False}}
    _assert_trace_decoding(trace["response_format"]["json_schema"]["schema"])


def test_json_object_schema_sends_the_schema_the_way_llama_cpp_python_takes_it(fake_llm):
    fake_llm.script(default=judge_reply)
    judge(fake_llm, structured_output="json_object_schema")

    [step], [trace] = requests_of(fake_llm, "llm.step"), requests_of(fake_llm, "llm.trace")
    ids = _decoded_span_ids(step["response_format"]["schema"])
    assert step["response_format"] == {"type": "json_object",
                                       "schema": schema_bounded(schema=step_schema(4, span_ids=ids))}
    assert trace["response_format"]["type"] == "json_object"
    _assert_trace_decoding(trace["response_format"]["schema"])
    # Room for the longest reply the bounded schema allows (under the ceiling), so a constrained reply is never cut.
    assert step["max_tokens"] == min(4096, llm.schema_max_tokens(schema=step["response_format"]["schema"]))


def test_the_decoding_schema_bounds_every_open_string_and_array():
    bounded = schema_bounded(schema=STEP_SCHEMA)
    step = bounded["properties"]["steps"]
    assert step["maxItems"] == llm.DECODING_ITEMS
    assert schema_bounded(schema=step_schema(3))["properties"]["steps"]["maxItems"] == 3  # the batch's size
    props = step["items"]["properties"]
    assert props["critique"]["maxLength"] == llm.DECODING_STRING_CHARS
    assert props["span_id"]["maxLength"] == llm.DECODING_ID_CHARS
    assert "maxLength" not in props["verdict"]  # an enum closes by itself
    assert props["score"]["enum"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]  # grammars ignore maximum
    issues = props["issues"]
    assert issues["maxItems"] == llm.DECODING_NESTED_ITEMS
    assert issues["items"]["properties"]["evidence"]["maxItems"] == llm.DECODING_DEEP_ITEMS
    assert "maxItems" not in STEP_SCHEMA["properties"]["steps"]  # the caller's schema (validation) is untouched


@pytest.mark.parametrize("mode", ["off", "auto"])  # auto: LiteLLM does not know the local model
def test_structured_output_off_or_unknown_asks_for_a_json_object(fake_llm, mode):
    fake_llm.script(default=judge_reply)
    judge(fake_llm, structured_output=mode)

    assert [r["response_format"] for r in fake_llm.requests] == [{"type": "json_object"}] * 2


@pytest.mark.parametrize("failure", [{"drop": True}, {"status": 500}, {"status": 503}])
def test_a_transient_failure_once_is_retried_and_the_trace_judged(fake_llm, waits, failure):
    fake_llm.script(failure, default=judge_reply)
    results = judge(fake_llm, step_judges=False)

    assert fake_llm.call_count == 2 and len(waits) == 1
    assert {r.status for r in results} == {"ok"} and results[0].details["calls"] == 2


def test_spent_retries_record_the_cause(fake_llm, waits):
    fake_llm.script(default={"drop": True})
    results = judge(fake_llm, max_retries=1)

    assert {r.status for r in results} == {"error"} and all(r.score is None for r in results)
    assert {r.details["cause"] for r in results} == {"connection"}
    assert all("InternalServerError" in r.error for r in results)  # the error text stays


def _cut_then(answer):
    """The first request of each judge is cut by the length limit; the next is answered."""
    seen: set[str] = set()

    def reply(request):
        name = judge_of(request)
        if name not in seen:
            seen.add(name)
            return {"content": '{"steps": [', "finish_reason": "length"}
        return answer(request)

    return reply


def test_a_cut_reply_is_asked_again_once_with_max_tokens_doubled(fake_llm):
    fake_llm.script(default=_cut_then(judge_reply))
    results = judge(fake_llm)

    assert {r.status for r in results} == {"ok"}
    steps = requests_of(fake_llm, "llm.step")
    assert [r["max_tokens"] for r in steps] == [STEP_JUDGE_MAX_TOKENS, 2 * STEP_JUDGE_MAX_TOKENS]
    assert steps[0]["messages"] == steps[1]["messages"]  # the same conversation, only a larger limit
    trace = requests_of(fake_llm, "llm.trace")
    assert [r["max_tokens"] for r in trace] == [2176, 4096]  # doubled up to the ceiling (4096)


def test_a_reply_cut_twice_is_an_error_with_the_length_cause(fake_llm):
    fake_llm.script(default={"content": '{"steps": [', "finish_reason": "length"})
    results = judge(fake_llm)

    assert fake_llm.call_count == 4  # each judge: the request and one with the limit doubled, never a third
    assert {r.status for r in results} == {"error"} and all(r.score is None for r in results)
    assert {r.details["cause"] for r in results} == {"invalid_output:length"}
    assert all("cut by the output token limit" in r.error for r in results)


def test_invalid_output_after_the_repair_has_its_cause(fake_llm):
    fake_llm.script(default='{"nothing": "useful"}')
    results = judge(fake_llm, step_judges=False)

    assert {r.details["cause"] for r in results} == {"invalid_output"}


def _naming_request():
    cluster = SimpleNamespace(id="c1", level="node", node="writer", size=4, trace_ids=["t1", "t2"],
                              nodes={"writer": 4})
    return SimpleNamespace(cluster=cluster, medoid_text="The writer promised a refund.",
                           example_texts=["The writer promised a refund."], terms=["refund"])


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["on", "off"])
def test_a_naming_request_carries_max_tokens_and_the_schema_when_on(settings, fake_llm, waits, mode):
    settings.CLEAR_JUDGE_API_BASE, settings.CLEAR_JUDGE_API_KEY = fake_llm.api_base, "test-key"
    settings.CLEAR_JUDGE_STRUCTURED_OUTPUT = mode
    name = {"title": "Refunds promised without a lookup", "description": "d", "root_cause": "r",
            "recommendation": "Add the rule."}
    fake_llm.script({"drop": True}, default=json.dumps(name))
    usage = NamingUsage()

    assert llm_namer_build(model=LOCAL_MODEL, usage=usage)(_naming_request()).title == name["title"]
    assert fake_llm.call_count == 2  # the dropped connection was retried
    sent = fake_llm.requests[-1]
    assert sent["max_tokens"] == NAMING_MAX_TOKENS
    expected = {"type": "json_schema", "json_schema": {"name": NAMING_JUDGE.replace(".", "_"),
                                                       "schema": schema_bounded(schema=NAMING_SCHEMA), "strict": False}}
    assert sent["response_format"] == (expected if mode == "on" else {"type": "json_object"})


@pytest.mark.django_db
def test_the_run_errors_carry_the_cause(project, settings, fake_llm, waits):
    from diagnosis.models import Feedback
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from tests.diagnosis.support import support_desk_ingest

    settings.CLEAR_JUDGE_MODEL, settings.CLEAR_JUDGE_API_BASE = "", fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY, settings.CLEAR_JUDGE_MAX_RETRIES = "test-key", 0
    support_desk_ingest(project=project, bugs="all", task_ids=["refund-status"])
    fake_llm.script(default={"content": '{"feedback": "cut', "finish_reason": "length"})
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, judges=["llm.trace"], model=LOCAL_MODEL,
                                                        enqueue=False))
    run.refresh_from_db()

    assert fake_llm.call_count == 2 and all(r["max_tokens"] for r in fake_llm.requests)
    assert run.errors and {e["cause"] for e in run.errors} == {"invalid_output:length"}
    assert all(e["error"] for e in run.errors)
    feedback = Feedback.objects.get(run=run, judge="llm.trace")
    assert feedback.status == "error" and feedback.details["cause"] == "invalid_output:length"
