"""Attribute mapping rules (traces/normalize/MAPPING.md): kind precedence, names, content carriers, usage."""

from __future__ import annotations

import json

import pytest

from traces.normalize.content import scan_flags
from traces.normalize.kinds import classify_kind
from traces.normalize.mapping import build_span_record
from traces.normalize.nodes import normalize_name


def _rec(attrs=None, *, name="span", events=None, parent="1111111111111111", resource=None, scope="s", status=0):
    return build_span_record(
        trace_id="a" * 32, span_id="b" * 16, parent_span_id=parent, name=name, attributes=attrs or {},
        events=events or [], status_code=status, status_message="", start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_001_000_000_000, resource=resource or {}, scope=scope,
    )


def _kind(attrs, name="span", scope="s"):
    return classify_kind(attrs, name, scope, scan_flags(attrs))


@pytest.mark.parametrize(
    "attrs,expected",
    [
        ({"langfuse.observation.type": "generation", "openinference.span.kind": "TOOL"}, "LLM"),
        ({"langfuse.observation.type": "span", "langfuse.observation.model.name": "gpt-4o"}, "LLM"),  # P0
        ({"langfuse.observation.type": "agent", "gen_ai.operation.name": "chat"}, "AGENT"),
        ({"openinference.span.kind": "RETRIEVER", "gen_ai.operation.name": "chat"}, "RETRIEVER"),
        ({"openinference.span.kind": "reranker"}, "RETRIEVER"),
        ({"openinference.span.kind": "PROMPT", "gen_ai.request.model": "m"}, "LLM"),
        ({"gen_ai.operation.name": "invoke_agent", "gen_ai.tool.name": "x"}, "AGENT"),
        ({"gen_ai.operation.name": "execute_tool"}, "TOOL"),
        ({"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e"}, "EMBEDDING"),
        ({"gen_ai.operation.name": "retrieval"}, "RETRIEVER"),
        ({"gen_ai.operation.name": "invoke_workflow"}, "CHAIN"),
        ({"gen_ai.operation.name": "create_agent"}, "AGENT"),
        ({"genkit:metadata:subtype": "tool"}, "TOOL"),
        ({"genkit:metadata:subtype": "embedder"}, "EMBEDDING"),
        ({"ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "gpt-4o"}, "LLM"),
        ({"operation.name": "ai.toolCall myFunction"}, "TOOL"),
        ({"ai.operationId": "ai.embedMany.doEmbed"}, "EMBEDDING"),
        ({"ai.operationId": "ai.generateText", "ai.model.id": "gpt-4o"}, "CHAIN"),  # vendor kind beats P10
        ({"gen_ai.tool.call.id": "call_1"}, "TOOL"),
        ({"flue.tool.name": "bash"}, "TOOL"),
        ({"flue.task.id": "t"}, "AGENT"),
        ({"mlflow.spanType": '"CHAT_MODEL"'}, "LLM"),
        ({"mlflow.spanType": '"AGENT"', "model": "x"}, "AGENT"),
        ({"traceloop.span.kind": "workflow"}, "CHAIN"),
        ({"traceloop.span.kind": "task"}, "CHAIN"),
        ({"traceloop.span.kind": "tool"}, "TOOL"),
        ({"llm.request.type": "embedding"}, "EMBEDDING"),
        ({"langwatch.span.type": "rag"}, "RETRIEVER"),
        ({"langsmith.span.kind": "retriever"}, "RETRIEVER"),
        ({"gen_ai.request.model": "gpt-4o"}, "LLM"),  # P10
        ({"model": "x"}, "LLM"),
        ({"model_name": "gpt-4o", "gen_ai.agent.name": "a", "agent_name": "a"}, "SPAN"),  # agent name never => AGENT
        ({"tool.name": "calc"}, "TOOL"),
        ({"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi"}, "LLM"),
        ({"llm.input_messages.0.message.role": "user"}, "LLM"),
        ({"retrieval.documents.0.document.content": "doc"}, "RETRIEVER"),
        ({"logfire.span_type": "annotation"}, "SPAN"),
        ({}, "SPAN"),
    ],
)
def test_kind_precedence(attrs, expected):
    assert _kind(attrs) == expected


def test_livekit_needs_its_scope_or_keys():
    assert _kind({}, name="agent_turn", scope="livekit-agents") == "AGENT"
    assert _kind({"lk.room": "r"}, name="function_tool") == "TOOL"
    assert _kind({}, name="agent_turn", scope="other") == "SPAN"


@pytest.mark.parametrize(
    "name,expected",
    [
        ("chat gpt-4o", "chat gpt-4o"),
        ("task-1234", "task"),
        ("invoke_agent Excel_Expert", "invoke_agent Excel_Expert"),
        ("GET /users/12345/orders", "GET /users/orders"),
        ("step 3", "step"),
        ("run 5f1b7c8e-2a4d-4c1e-9b7a-0d3c2b1a0f9e", "run"),
        ("session_5f1b7c8e2a4d4c1e", "session"),
        ("gpt-3.5-turbo-0125", "gpt-3.5-turbo"),
        ("feedback: factuality", "feedback: factuality"),
        ("worker-2", "worker-2"),
        ("12345", "12345"),
        ("", "span"),
    ],
)
def test_normalize_name(name, expected):
    assert normalize_name(name) == expected


def test_node_fields_by_kind():
    agent = _rec({"gen_ai.operation.name": "invoke_agent"}, name="invoke_agent triage")
    assert (agent.node, agent.agent_name) == ("triage", "triage")
    anonymous = _rec({"openinference.span.kind": "AGENT"}, name="Agent run 42")
    assert anonymous.node == "Agent run"
    lf_agent = _rec({"langfuse.observation.type": "agent"}, name="researcher")
    assert lf_agent.node == "researcher"
    tool = _rec({"gen_ai.tool.name": "search", "agent.name": "planner"})
    assert (tool.kind, tool.node, tool.node_fallback) == ("TOOL", "planner", "planner")
    tool2 = _rec({"gen_ai.operation.name": "execute_tool"}, name="execute_tool calc")
    assert (tool2.node, tool2.tool_name, tool2.node_fallback) == (None, "calc", "calc")
    tl_tool = _rec({"traceloop.span.kind": "tool", "traceloop.entity.name": "fetch_page"}, name="fetch_page.tool")
    assert (tl_tool.kind, tl_tool.tool_name) == ("TOOL", "fetch_page")
    chain = _rec({"traceloop.span.kind": "workflow"}, name="pipeline-9876")
    assert (chain.node, chain.node_fallback) == (None, "pipeline")
    evaluator = _rec({"openinference.span.kind": "EVALUATOR", "gen_ai.agent.name": "planner"}, name="judge 123")
    assert evaluator.node == "judge"


def test_io_carriers_in_precedence_order():
    # OpenInference input.value with JSON mime, output.value text
    span = _rec({"input.value": '{"q": 1}', "input.mime_type": "application/json", "output.value": "[INFO] done"})
    assert span.input == {"q": 1} and span.output == "[INFO] done"
    # langfuse.observation.* beats everything
    span = _rec({"langfuse.observation.input": '"x"', "input.value": "y", "gen_ai.input.messages": "[]"})
    assert span.input == "x"
    # deprecated per-message events + gen_ai.choice
    events = [
        {"name": "gen_ai.system.message", "time": None, "attributes": {"content": "be brief"}},
        {"name": "gen_ai.user.message", "time": None, "attributes": {"content": "hi", "gen_ai.system": "openai"}},
        {"name": "gen_ai.choice", "time": None, "attributes": {"index": 0, "message": '{"content": "hello"}'}},
    ]
    span = _rec({"gen_ai.operation.name": "chat"}, events=events)
    assert span.input == [{"content": "be brief", "role": "system"}, {"content": "hi", "role": "user"}]
    assert span.output == {"index": 0, "message": {"content": "hello"}}
    # the newer operation.details event wins over per-message events
    details = {"name": "gen_ai.client.inference.operation.details", "time": None, "attributes": {
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "q"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "a"}]}]),
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "sys"}])}}
    span = _rec({}, events=[*events, details])
    assert span.input[0] == {"role": "system", "parts": [{"type": "text", "content": "sys"}]}
    assert span.output[0]["parts"][0]["content"] == "a"
    # flattened OpenInference messages
    span = _rec({"llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "hi",
                 "llm.input_messages.1.message.role": "assistant", "llm.input_messages.1.message.content": "yo",
                 "llm.output_messages.0.message.role": "assistant",
                 "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f"})
    assert span.input == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert span.output[0]["tool_calls"][0]["tool_call"]["function"]["name"] == "f"
    # huge flattened indexes are capped instead of allocating
    span = _rec({"gen_ai.prompt.99999999.content": "x", "gen_ai.prompt.0.content": "ok"})
    assert span.input == [{"content": "ok"}]
    # Vercel AI SDK, MLflow, tool call attributes, system instructions
    span = _rec({"ai.prompt.messages": '[{"role": "user", "content": "hi"}]', "ai.response.text": "hello"})
    assert span.input == [{"role": "user", "content": "hi"}] and span.output == "hello"
    span = _rec({"mlflow.spanInputs": '{"x": 1}', "mlflow.spanOutputs": '"ok"'})
    assert span.input == {"x": 1} and span.output == "ok"
    span = _rec({"gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": '{"a": 1}', "gen_ai.tool.call.result": "42"})
    assert span.input == {"a": 1} and span.output == "42"
    span = _rec({"gen_ai.input.messages": '[{"role": "user", "content": "q"}]',
                 "gen_ai.system_instructions": "be nice"})
    assert span.input == [{"role": "system", "content": "be nice"}, {"role": "user", "content": "q"}]
    # empty carriers: later carriers win, else "" (a step that produced nothing)
    assert _rec({"output.value": "", "final_result": "done"}).output == "done"
    assert _rec({"output.value": ""}).output == ""
    assert _rec({}).output is None


def test_usage_sources():
    assert (_rec({"llm.token_count.prompt": 10, "llm.token_count.completion": 2,
                  "llm.token_count.prompt_details.cache_read": 4}).input_tokens) == 10
    span = _rec({"ai.usage.promptTokens": "7", "ai.usage.completionTokens": 3, "gen_ai.usage.input_tokens": 99})
    assert (span.input_tokens, span.output_tokens) == (7, 3)  # Vercel before generic, never summed
    span = _rec({"langfuse.observation.usage_details": json.dumps(
        {"input": 50, "input_cached_tokens": 30, "output": 10, "output_reasoning": 5, "total": 95})})
    assert (span.input_tokens, span.output_tokens, span.cached_tokens) == (80, 15, 30)
    span = _rec({"langfuse.observation.usage_details": json.dumps(
        {"prompt_tokens": 20, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 8}})})
    assert (span.input_tokens, span.output_tokens, span.cached_tokens) == (20, 4, 8)
    span = _rec({"gen_ai.aggregated_usage.input_tokens": 5, "gen_ai.operation.name": "chat"})
    assert span.input_tokens == 5 and span.usage_is_aggregate
    assert _rec({"gen_ai.usage.input_tokens": "not a number"}).input_tokens is None
    chain = _rec({"traceloop.span.kind": "workflow", "gen_ai.usage.input_tokens": 10})
    assert chain.usage_is_aggregate


def test_cost_sources():
    assert _rec({"gen_ai.usage.cost": 0.5}).cost == 0.5
    assert _rec({"llm.cost.total": "0.25"}).cost == 0.25
    assert _rec({"llm.cost.prompt": 0.1, "llm.cost.completion": 0.2}).cost == pytest.approx(0.3)
    assert _rec({"langfuse.observation.cost_details": '{"total": 1.5, "input": 1}'}).cost == 1.5
    assert _rec({"gen_ai.usage.cost": "NaN"}).cost is None


def test_langfuse_attributes_and_root_override():
    span = _rec({"langfuse.internal.as_root": True, "langfuse.trace.input": '{"q": "x"}',
                 "langfuse.observation.level": "ERROR", "langfuse.observation.status_message": "quota",
                 "langfuse.trace.metadata": '{"a": 1}', "langfuse.environment": "dev",
                 "langfuse.observation.metadata": '{"m": 2}', "langfuse.session.id": "s"},
                resource={"langfuse.environment": "prod", "langfuse.release": "r1"})
    assert span.is_root and span.input == {"q": "x"}
    assert (span.status, span.status_message) == ("error", "quota")
    assert span.metadata["trace_metadata"] == {"a": 1} and span.metadata["m"] == 2
    assert (span.environment, span.release, span.session_id) == ("dev", "r1", "s")


def test_metadata_fallbacks_for_session_user_tags():
    span = _rec({"metadata": json.dumps({"langfuse_session_id": "s9", "langfuse_user_id": "u9",
                                         "langfuse_tags": ["x"]}),
                 "ai.telemetry.metadata.sessionId": "s-ai"})
    assert (span.session_id, span.user_id, span.tags) == ("s-ai", "u9", ["x"])
