import json

import litellm


def test_litellm_talks_to_the_scripted_server(fake_llm):
    fake_llm.script('{"verdict": "fail"}', {"status": 429, "headers": {"Retry-After": "1"}}, default="again")
    first = litellm.completion(
        model="openai/judge-model", api_base=fake_llm.api_base, api_key="test",
        messages=[{"role": "user", "content": "judge this step"}], response_format={"type": "json_object"},
    )
    assert json.loads(first.choices[0].message.content) == {"verdict": "fail"}
    assert first.usage.prompt_tokens > 0
    try:
        litellm.completion(model="openai/judge-model", api_base=fake_llm.api_base, api_key="test", num_retries=0,
                           messages=[{"role": "user", "content": "x"}])
        raise AssertionError("a scripted 429 must surface as an error")
    except litellm.RateLimitError:
        pass
    third = litellm.completion(model="openai/judge-model", api_base=fake_llm.api_base, api_key="test",
                               messages=[{"role": "user", "content": "y"}])
    assert third.choices[0].message.content == "again"
    assert fake_llm.call_count == 3
    assert fake_llm.requests[0]["messages"][0]["content"] == "judge this step"
    assert fake_llm.requests[0]["_headers"]["authorization"] == "Bearer test"


def test_a_callable_script_sees_the_request(fake_llm):
    fake_llm.script(default=lambda request: request["messages"][-1]["content"].upper())
    reply = litellm.completion(model="openai/m", api_base=fake_llm.api_base, api_key="k",
                               messages=[{"role": "user", "content": "echo"}])
    assert reply.choices[0].message.content == "ECHO"
