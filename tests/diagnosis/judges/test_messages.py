"""diagnosis/judges/messages.py: one conversation, whatever shape the instrumentation recorded it in. The judges of a
conversation (who said what before a write) read it there; read as OpenInference's `{"role", "content"}` alone, a
GenAI `parts` message had no text and an Anthropic tool result was a user speaking."""

import json

import pytest

from diagnosis.judges.messages import messages_of

REPLY = {"booking_id": "BK-4471", "status": "confirmed"}
# (what the user said, what the tool replied, what the agent said) in each shape: the same three messages.
SHAPES = {
    "openai_chat": [
        {"role": "user", "content": "Cancel BK-4471, please."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_booking", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_booking", "content": json.dumps(REPLY)},
        {"role": "assistant", "content": "Shall I cancel it?"},
    ],
    "openai_parts": [
        {"role": "user", "content": [{"type": "text", "text": "Cancel BK-4471, please."}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_booking", "content": json.dumps(REPLY)},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Shall I cancel it?"}]},
    ],
    "genai_parts": [
        {"role": "user", "parts": [{"type": "text", "content": "Cancel BK-4471, please."}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "get_booking", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": json.dumps(REPLY)}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "Shall I cancel it?"}]},
    ],
    "anthropic": [
        {"role": "user", "content": [{"type": "text", "text": "Cancel BK-4471, please."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_booking", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": json.dumps(REPLY)}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Shall I cancel it?"}]},
    ],
    "vercel": [
        {"role": "user", "content": "Cancel BK-4471, please."},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "get_booking",
                                      "result": json.dumps(REPLY)}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Shall I cancel it?"}]},
    ],
    "gemini": [
        {"role": "user", "parts": [{"text": "Cancel BK-4471, please."}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_booking", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_booking", "response": json.dumps(REPLY)}}]},
        {"role": "model", "parts": [{"text": "Shall I cancel it?"}]},
    ],
    "responses_api": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Cancel BK-4471, please."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_booking", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": json.dumps(REPLY)},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Shall I cancel it?"}]},
    ],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_reads_as_the_same_conversation(shape):
    said = [(m["role"], m["content"]) for m in messages_of(SHAPES[shape]) if m["content"]]
    assert said == [("user", "Cancel BK-4471, please."), ("tool", json.dumps(REPLY)),
                    ("assistant", "Shall I cancel it?")], said


def test_a_tool_call_is_not_text_the_agent_said():
    for shape in ("anthropic", "genai_parts", "openai_chat"):
        calls = [m for m in messages_of(SHAPES[shape]) if m["role"] == "assistant" and not m["content"]]
        assert len(calls) == 1, shape  # the turn is there, it says nothing: BK-4471's arguments are not shown


def test_anthropic_results_come_before_the_users_words_in_one_message():
    message = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "text", "text": "cancelled"}]}, {"type": "text", "text": "Thanks, and the other one?"}]}
    assert [(m["role"], m["content"]) for m in messages_of([message])] == [
        ("tool", "cancelled"), ("user", "Thanks, and the other one?")]


def test_wrappers_and_what_is_not_a_conversation():
    user = {"role": "user", "content": "hi"}
    assert [m["content"] for m in messages_of({"messages": [user]})] == ["hi"]
    assert [m["content"] for m in messages_of(json.dumps([user]))] == ["hi"]
    assert [m["role"] for m in messages_of({"choices": [{"index": 0, "message": {"role": "assistant",
                                                                                   "content": "ok"}}]})] == ["assistant"]
    assert [m["role"] for m in messages_of({"role": "Human", "content": "hi"})] == ["user"]
    for value in (None, "", "plain text", {"booking_id": "BK-1"}, [1, 2], [{"content": "no role"}]):
        assert messages_of(value) == [], value
