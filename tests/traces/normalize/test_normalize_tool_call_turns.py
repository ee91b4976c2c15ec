"""A model turn that only calls tools keeps its tool calls as the span's output, whichever carrier holds them.

A blank carrier ahead in precedence (`output.value` = "null", the JSON of a turn's null `content`, or whitespace)
used to become the output and hide `gen_ai.output.messages`; it now only counts when nothing else holds a value.
"""

from __future__ import annotations

import json

import pytest

from traces.normalize.mapping import build_span_record

_MESSAGE = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O-1"}'}}]}


def _output(attrs: dict):
    record = build_span_record(
        trace_id="a" * 32, span_id="b" * 16, parent_span_id="c" * 16, name="chat gpt-4o",
        attributes={"gen_ai.operation.name": "chat", **attrs}, events=[], status_code=0, status_message="",
        start_ns=1_700_000_000_000_000_000, end_ns=1_700_000_001_000_000_000, resource={}, scope="s",
    )
    return record.output


@pytest.mark.parametrize("blank", ["null", " null ", "  ", "\n"])
def test_a_blank_carrier_does_not_hide_the_tool_calls(blank):
    assert _output({"output.value": blank, "gen_ai.output.messages": json.dumps([_MESSAGE])}) == [_MESSAGE]
    flat = {"output.value": blank, "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_order"}
    assert _output(flat) == [{"role": "assistant", "tool_calls": [{"tool_call": {"function": {"name": "get_order"}}}]}]


def test_a_blank_carrier_alone_is_kept_as_sent():
    assert _output({"output.value": "null"}) == "null"  # e.g. a tool that returned None: not an empty output
    assert _output({"gen_ai.tool.call.result": "null", "gen_ai.operation.name": "execute_tool"}) == "null"
    assert _output({"output.value": "  "}) == "  "
    assert _output({"output.value": ""}) == ""  # present but empty: the step produced nothing


def test_a_carrier_with_content_still_wins_by_precedence():
    completion = {"id": "chatcmpl-1", "choices": [{"index": 0, "message": _MESSAGE, "finish_reason": "tool_calls"}]}
    assert _output({"output.value": json.dumps(completion), "gen_ai.output.messages": json.dumps([_MESSAGE])}) \
        == completion
