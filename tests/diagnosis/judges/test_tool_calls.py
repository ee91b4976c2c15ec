"""diagnosis/judges/tool_calls.py: a tool the instrumentation recorded as a plain span (the Langfuse SDK's
`@observe()`) is a tool call to the judges when a model turn called it, and only then."""

import json

import pytest

from diagnosis.judges.tool_calls import called_tool_names, tool_spans_infer
from tests.diagnosis.support import span

OPENAI = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "cancel_booking", "arguments": "{}"}}]}


@pytest.mark.parametrize("output", [
    [OPENAI], json.dumps(OPENAI), {"choices": [{"message": OPENAI}]},
    [{"role": "assistant", "parts": [{"type": "tool_call", "name": "cancel_booking", "arguments": {}}]}],
    {"role": "assistant", "content": [{"type": "tool_use", "name": "cancel_booking", "input": {}}]},
    {"role": "model", "parts": [{"functionCall": {"name": "cancel_booking", "args": {}}}]},
    [{"role": "assistant", "tool_calls": [{"tool_call": {"function": {"name": "cancel_booking"}}}]}],
])
def test_the_tools_a_model_turn_calls_in_every_format(output):
    assert called_tool_names(output) == {"cancel_booking"}


def _run(*, tool_kind="SPAN", model_inside=False):
    spans = [span("root", parent="", kind="SPAN", node="desk", at=0, name="desk", duration=5),
             span("l1", kind="LLM", node="desk", at=1, name="OpenAI-generation", output=[OPENAI]),
             span("t1", kind=tool_kind, node="cancel_booking", at=2, name="cancel_booking", output={"ok": True}),
             span("x1", kind="SPAN", node="format_reply", at=3, name="format_reply", output="done")]
    if model_inside:
        spans.append(span("l2", parent="t1", kind="LLM", node="cancel_booking", at=2.1, name="OpenAI-generation"))
    return spans


def test_an_untyped_span_a_model_called_is_the_calling_agents_tool_call():
    spans = _run()
    tool_spans_infer(spans)
    kinds = {s.span_id: (s.kind, s.tool_name, s.node) for s in spans}
    assert kinds["t1"] == ("TOOL", "cancel_booking", "desk")
    assert kinds["x1"][0] == "SPAN" and kinds["root"][0] == "SPAN"  # nobody called them


def test_nothing_is_inferred_beside_typed_tools_or_around_a_model():
    typed = _run(tool_kind="TOOL")
    typed[3].name = "cancel_booking"  # a wrapper of the same name beside the typed tool span stays what it is
    tool_spans_infer(typed)
    assert typed[3].kind == "SPAN"
    agent_as_tool = _run(model_inside=True)
    tool_spans_infer(agent_as_tool)
    assert agent_as_tool[2].kind == "SPAN"  # a model runs under it: an agent, not a tool
