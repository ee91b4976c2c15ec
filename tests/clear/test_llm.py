"""The one LLM client (clear/llm.py) against the fake OpenAI-compatible server: retries (connection errors, 5xx,
429s and timeouts, Retry-After honoured, bounded by a caller's deadline), the output cap and the length retry,
structured output, JSON parsing and the one repair request, tokens and cost, and the causes of failures."""

import os
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from types import SimpleNamespace

import pytest

from clear import llm
from clear.llm import (
    LlmEndpoint, LlmUsage, backoff_seconds, cost_usd, json_object_parse, llm_complete, llm_json_complete,
    price_per_token, retry_after_seconds,
)
from clear.llm_errors import LENGTH, LlmCallError, llm_error_cause
from clear.llm_limits import DEFAULT_MAX_TOKENS

MODEL = "openai/gpt-4o-mini"
MESSAGES = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "ping"}]


@pytest.fixture
def waits(monkeypatch):
    """Records the back-off waits instead of sleeping."""
    recorded: list[float] = []
    monkeypatch.setattr(llm, "sleep", recorded.append)
    return recorded


def endpoint(fake_llm, **overrides) -> LlmEndpoint:
    return LlmEndpoint(**{"model": MODEL, "api_base": fake_llm.api_base, "api_key": "test-key", **overrides})


def complete(fake_llm, usage: LlmUsage | None = None, **overrides):
    return llm_complete(endpoint=endpoint(fake_llm, **overrides), messages=MESSAGES, usage=usage or LlmUsage())


def test_litellm_is_loaded_with_the_local_price_table():
    assert llm.litellm_load().model_cost
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_a_reply_carries_its_content_tokens_and_model(fake_llm):
    fake_llm.script({"content": '{"ok": true}', "usage": {"prompt_tokens": 12, "completion_tokens": 3}})
    usage = LlmUsage()
    reply = complete(fake_llm, usage)

    assert reply.content == '{"ok": true}' and reply.finish_reason == "stop"
    assert (reply.input_tokens, reply.output_tokens) == (12, 3) and reply.model.endswith("gpt-4o-mini")
    assert (usage.calls, usage.input_tokens, usage.output_tokens, usage.notes) == (1, 12, 3, [])
    request = fake_llm.requests[0]
    assert request["response_format"] == {"type": "json_object"} and request["temperature"] == 0
    assert request["messages"] == MESSAGES


def test_429_is_retried_honouring_retry_after(fake_llm, waits):
    fake_llm.script({"status": 429, "headers": {"Retry-After": "7"}}, default='{"ok": true}')
    usage = LlmUsage()
    complete(fake_llm, usage)

    assert fake_llm.call_count == 2 and usage.calls == 2
    assert waits == [7.0]


def test_429_without_retry_after_backs_off_exponentially(fake_llm, waits):
    fake_llm.script(*[{"status": 429}] * 3, default='{"ok": true}')
    complete(fake_llm)

    assert fake_llm.call_count == 4 and len(waits) == 3
    for attempt, wait in enumerate(waits):
        base = llm.BACKOFF_BASE_S * 2 ** attempt
        assert base / 2 <= wait <= base


def test_retries_stop_after_max_retries(fake_llm, waits):
    fake_llm.script(default={"status": 429, "headers": {"retry-after-ms": "10"}})
    with pytest.raises(llm.litellm_load().RateLimitError):
        complete(fake_llm, max_retries=2)

    assert fake_llm.call_count == 3
    assert waits == [0.01, 0.01]


def test_timeout_is_retried(fake_llm, waits):
    def slow(request):
        time.sleep(1.5)
        return '{"ok": true}'

    fake_llm.script(slow, default='{"ok": true}')
    complete(fake_llm, timeout=0.5)

    assert fake_llm.call_count == 2 and len(waits) == 1


@pytest.mark.parametrize("status, cause", [(400, "provider_error"), (401, "provider_error"),
                                           (404, "provider_error")])
def test_other_errors_fail_at_once(fake_llm, waits, status, cause):
    fake_llm.script(default={"status": status})
    with pytest.raises(Exception) as raised:
        complete(fake_llm)

    assert fake_llm.call_count == 1 and waits == []
    assert llm_error_cause(error=raised.value) == cause


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_is_retried(fake_llm, waits, status):
    fake_llm.script({"status": status}, default='{"ok": true}')
    usage = LlmUsage()
    reply = complete(fake_llm, usage)

    assert reply.content == '{"ok": true}' and fake_llm.call_count == 2 and usage.calls == 2 and len(waits) == 1


def test_a_dropped_connection_is_retried(fake_llm, waits):
    fake_llm.script({"drop": True}, default='{"ok": true}')
    reply = complete(fake_llm)

    assert reply.content == '{"ok": true}' and fake_llm.call_count == 2 and len(waits) == 1


@pytest.mark.parametrize("item, cause", [({"drop": True}, "connection"), ({"status": 500}, "server_error"),
                                         ({"status": 503}, "server_error"), ({"status": 429}, "rate_limit")])
def test_spent_retries_raise_with_the_cause(fake_llm, waits, item, cause):
    fake_llm.script(default=item)
    with pytest.raises(Exception) as raised:
        complete(fake_llm, max_retries=1)

    assert fake_llm.call_count == 2 and len(waits) == 1
    assert llm_error_cause(error=raised.value) == cause


def test_a_timeout_has_its_cause(fake_llm, waits):
    def slow(request):
        time.sleep(1.0)
        return '{"ok": true}'

    fake_llm.script(default=slow)
    with pytest.raises(llm.litellm_load().Timeout) as raised:
        complete(fake_llm, timeout=0.3, max_retries=0)
    assert llm_error_cause(error=raised.value) == "timeout"
    assert llm_error_cause(error=ValueError("a bug")) == "internal_error"


def test_a_deadline_cuts_the_timeout_and_the_waits_and_a_runner_runs_the_request(fake_llm, waits):
    fake_llm.script({"status": 429, "headers": {"Retry-After": "60"}}, default='{"ok": true}')
    timeouts: list[float] = []

    def runner(call, timeout):
        timeouts.append(timeout)
        return call()

    llm_complete(endpoint=endpoint(fake_llm, timeout=30), messages=MESSAGES, usage=LlmUsage(),
                 remaining=lambda: 5.0, runner=runner)
    assert timeouts == [5.0, 5.0] and waits == [5.0]


def test_missing_usage_is_estimated_with_a_note(monkeypatch):
    response = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content='{"a": 1}'),
                                                        finish_reason="stop")], usage=None, model=None)

    class FakeLiteLLM:
        RateLimitError = Timeout = type("Never", (Exception,), {})

        @staticmethod
        def completion(**kwargs):
            return response

    monkeypatch.setattr(llm, "litellm_load", lambda: FakeLiteLLM)
    usage = LlmUsage()
    reply = llm_complete(endpoint=LlmEndpoint(model="m"), messages=MESSAGES, usage=usage)

    assert reply.model == "m" and reply.input_tokens == llm.tokens_estimate(MESSAGES) and reply.output_tokens > 0
    assert usage.notes == [llm.NO_USAGE_NOTE]


def test_retry_after_as_an_http_date_and_a_cap():
    later = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    error = SimpleNamespace(litellm_response_headers={"retry-after": later})
    assert 25 <= retry_after_seconds(error=error) <= 30
    assert retry_after_seconds(error=SimpleNamespace(litellm_response_headers={"retry-after": "soon"})) is None
    assert retry_after_seconds(error=SimpleNamespace(response=SimpleNamespace(headers={"retry-after-ms": "250"}))) \
        == 0.25
    huge = SimpleNamespace(litellm_response_headers={"retry-after": "3600"})
    assert backoff_seconds(attempt=1, error=huge) == llm.RETRY_AFTER_MAX_S


@pytest.mark.parametrize("content, value", [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": 1}\n```', {"a": 1}),
    ("  ```\n{\"a\": 1}\n```  ", {"a": 1}),
])
def test_a_json_object_is_parsed_fenced_or_not(content, value):
    assert json_object_parse(content=content) == (value, "")


@pytest.mark.parametrize("content, error", [("[1, 2]", "one JSON object"), ("not json", "not valid JSON"),
                                            ("", "not valid JSON")])
def test_anything_else_says_why(content, error):
    value, problem = json_object_parse(content=content)
    assert value is None and error in problem


def _json_call(fake_llm, **kwargs):
    usage = LlmUsage()
    reply = llm_json_complete(messages=MESSAGES, complete=lambda conversation: llm_complete(
        endpoint=endpoint(fake_llm), messages=conversation, usage=usage), **kwargs)
    return reply, usage


def test_an_invalid_reply_gets_exactly_one_repair_carrying_the_problem(fake_llm):
    fake_llm.script("sure! here it is", '{"answer": 42}')
    seen: list[tuple[int, list[str]]] = []
    reply, usage = _json_call(fake_llm, on_reply=lambda n, content, problems: seen.append((n, problems)))

    assert reply.value == {"answer": 42} and reply.problems == [] and reply.repaired
    assert usage.calls == 2 and [n for n, _ in seen] == [1, 2] and seen[1][1] == []
    repair = fake_llm.requests[1]["messages"]
    assert repair[:2] == MESSAGES and repair[2] == {"role": "assistant", "content": "sure! here it is"}
    assert repair[3]["content"].startswith("Your reply could not be used: the reply is not valid JSON")


def test_a_check_rejects_and_a_second_invalid_reply_is_returned_with_its_problems(fake_llm):
    fake_llm.script('{"answer": 1}', '{"answer": 2}', default='{"answer": 42}')
    reply, usage = _json_call(fake_llm, check=lambda value: [] if value["answer"] == 42 else ["answer must be 42"])

    assert fake_llm.call_count == 2 and usage.calls == 2
    assert reply.value == {"answer": 2} and reply.problems == ["answer must be 42"] and not reply.repaired
    assert "answer must be 42" in fake_llm.requests[1]["messages"][-1]["content"]


def test_a_cut_reply_from_a_custom_complete_is_told_so_in_the_repair():
    replies = [llm.LlmReply(content='{"steps": [', finish_reason="length", model="m", input_tokens=1,
                            output_tokens=1, provider_cost=None),
               llm.LlmReply(content='{"steps": []}', finish_reason="stop", model="m", input_tokens=1,
                            output_tokens=1, provider_cost=None)]
    seen: list[list[dict]] = []

    def complete(conversation):
        seen.append(conversation)
        return replies[len(seen) - 1]

    reply = llm_json_complete(messages=MESSAGES, complete=complete)
    assert reply.repaired and "cut off by the output token limit" in seen[1][-1]["content"]


def test_a_reply_cut_by_the_length_limit_is_asked_again_once_with_the_limit_doubled(fake_llm):
    fake_llm.script({"content": '{"steps": [', "finish_reason": "length"}, '{"steps": []}')
    usage = LlmUsage()
    reply = complete(fake_llm, usage, max_tokens=300, max_tokens_ceiling=1000)

    assert reply.content == '{"steps": []}' and usage.calls == 2
    assert [r["max_tokens"] for r in fake_llm.requests] == [300, 600]
    assert fake_llm.requests[0]["messages"] == fake_llm.requests[1]["messages"] == MESSAGES
    assert any("asked again with 600" in note for note in usage.notes)


def test_a_reply_cut_twice_is_an_error_with_the_length_cause(fake_llm):
    fake_llm.script(default={"content": '{"steps": [', "finish_reason": "length"})
    with pytest.raises(LlmCallError) as raised:
        complete(fake_llm, max_tokens=700, max_tokens_ceiling=1000)

    assert raised.value.cause == "invalid_output:length" and llm_error_cause(error=raised.value) == LENGTH
    assert [r["max_tokens"] for r in fake_llm.requests] == [700, 1000]  # doubled, but never above the ceiling


def test_a_reply_cut_at_the_ceiling_is_not_asked_again(fake_llm):
    fake_llm.script(default={"content": '{"steps": [', "finish_reason": "length"})
    with pytest.raises(LlmCallError, match="the ceiling"):
        complete(fake_llm, max_tokens=1000, max_tokens_ceiling=1000)
    assert fake_llm.call_count == 1


def test_a_json_call_raises_the_length_error_instead_of_a_repair(fake_llm):
    fake_llm.script(default={"content": '{"steps": [', "finish_reason": "length"})
    with pytest.raises(LlmCallError):
        _json_call(fake_llm)
    assert fake_llm.call_count == 2 and fake_llm.requests[1]["max_tokens"] == 2 * fake_llm.requests[0]["max_tokens"]


def test_provider_errors_propagate_from_a_json_call(fake_llm):
    fake_llm.script(default={"status": 400})
    with pytest.raises(Exception, match="BadRequest"):
        _json_call(fake_llm)


def test_cost_from_the_price_table_overrides_and_unknown_models():
    assert price_per_token(model=MODEL) == price_per_token(model="gpt-4o-mini") == (1.5e-07, 6e-07)
    assert cost_usd(model=MODEL, input_tokens=1000, output_tokens=100) == pytest.approx(1000 * 1.5e-07 + 100 * 6e-07)
    assert cost_usd(model="x/priced", input_tokens=10, output_tokens=1, overrides={"x/priced": (1, 2)}) == 12
    assert price_per_token(model="openai/clear-test-model-without-a-price") is None
    assert cost_usd(model="openai/clear-test-model-without-a-price", input_tokens=1, output_tokens=1) is None


def test_every_request_carries_max_tokens_never_above_the_ceiling(fake_llm):
    fake_llm.script(default='{"ok": true}')
    complete(fake_llm)
    complete(fake_llm, max_tokens=50, temperature=0.3)
    complete(fake_llm, max_tokens=5000, max_tokens_ceiling=2000)
    complete(fake_llm, max_tokens=None, max_tokens_ceiling=1500)
    first, second, third, fourth = fake_llm.requests
    assert first["max_tokens"] == DEFAULT_MAX_TOKENS
    assert second["max_tokens"] == 50 and second["temperature"] == 0.3
    assert third["max_tokens"] == 2000 and fourth["max_tokens"] == 1500


SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def _with_schema(fake_llm, **overrides):
    return llm_complete(endpoint=endpoint(fake_llm, **overrides), messages=MESSAGES, usage=LlmUsage(),
                        schema=SCHEMA, schema_name="llm.step judge")


def test_structured_output_on_sends_the_schema(fake_llm):
    fake_llm.script(default='{"ok": true}')
    _with_schema(fake_llm, model="openai/local-model", structured_output="on")

    assert fake_llm.requests[0]["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "llm_step_judge", "schema": SCHEMA, "strict": False}}


def test_structured_output_off_asks_for_a_json_object(fake_llm):
    fake_llm.script(default='{"ok": true}')
    _with_schema(fake_llm, structured_output="off")

    assert fake_llm.requests[0]["response_format"] == {"type": "json_object"}


def test_structured_output_auto_follows_litellm(fake_llm):
    fake_llm.script(default='{"ok": true}')
    _with_schema(fake_llm, model="openai/gpt-4o-mini", structured_output="auto")  # LiteLLM: supported
    _with_schema(fake_llm, model="openai/clear-local-model", structured_output="auto")  # unknown: not
    complete(fake_llm, structured_output="on")  # no schema from the caller: nothing to send

    known, unknown, schemaless = (r["response_format"] for r in fake_llm.requests)
    assert known["type"] == "json_schema" and known["json_schema"]["schema"] == SCHEMA
    assert unknown == schemaless == {"type": "json_object"}
