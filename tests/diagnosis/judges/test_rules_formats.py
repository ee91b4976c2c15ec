"""Rule judges on tool-calling runs in the formats real agents emit: a model turn that only calls tools is output.

The false alarm this guards against: on real runs of an OpenAI tool-calling agent, rule.empty_output called every
trace's tool-call turn (`content: null` + `tool_calls`) empty, because the emptiness check knew only three shapes at
the top of a message list; a choice (`choices[].message`), Anthropic `tool_use` blocks, content-part lists and the
like all read as "no text, no tool call".
"""

import collections
import json
from pathlib import Path

import pytest

from diagnosis.judges.rules.output import rule_empty_output
from diagnosis.judges.text import has_content, maybe_json, value_text
from diagnosis.models import Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from tests.diagnosis.formats import (
    FORMATS,
    TOOL_NAMES,
    TRACES_PER_FORMAT,
    tool_call_turns,
    tool_calling_payloads,
)
from tests.diagnosis.support import ingest_otlp, span, view
from traces.models import Span

pytestmark = pytest.mark.django_db

def _verdicts(run) -> dict[str, int]:
    rows = Feedback.objects.filter(run=run).values_list("verdict", "status")
    return dict(collections.Counter(verdict or status for verdict, status in rows))


def test_successful_tool_calling_runs_pass_every_rule_in_every_format(project):
    for fmt in FORMATS:
        for body in tool_calling_payloads(fmt=fmt):
            ingest_otlp(project=project, body=body, content_type="application/json")
    measured = {}
    for fmt in FORMATS:
        run = diagnosis_run_start(project=project, release=fmt, judges=["rules"], enqueue=False)
        run = diagnosis_run_execute(run=run)
        assert (run.status, run.total_count, run.error_count) == ("succeeded", TRACES_PER_FORMAT, 0), fmt
        feedback = Feedback.objects.filter(run=run)
        measured[fmt] = _verdicts(run)
        assert not feedback.filter(judge="rule.empty_output").exclude(verdict="pass").exists(), fmt
        assert list(feedback.filter(verdict="fail").values_list("judge", "critique")) == [], fmt
        # The tool-call turns were stored with their tool calls (a blank `output.value` did not hide them), and
        # every rule looked at every trace.
        turns = [s for s in Span.objects.filter(trace__project=project, trace__release=fmt, kind="LLM")
                 if any(name in value_text(s.output) for name in TOOL_NAMES)]
        assert len(turns) == tool_call_turns(fmt=fmt) and all(has_content(s.output) for s in turns), fmt
        assert feedback.filter(judge="rule.empty_output", verdict="pass").count() == TRACES_PER_FORMAT
    print(json.dumps(measured, indent=1))


_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O-1"}'}}
_MESSAGE = {"role": "assistant", "content": None, "tool_calls": [_CALL]}


@pytest.mark.parametrize("output", [
    [_MESSAGE],
    _MESSAGE,
    [{"index": 0, "message": _MESSAGE, "finish_reason": "tool_calls"}],
    {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": _MESSAGE}]},
    json.dumps([{"index": 0, "message": _MESSAGE}]),
    [{"role": "assistant", "content": "", "function_call": {"name": "get_order", "arguments": "{}"}}],
    [{"role": "assistant", "parts": [{"type": "text", "content": ""}, {"type": "tool_call", "name": "get_order"}]}],
    [{"role": "assistant", "tool_calls": [{"tool_call": {"function": {"name": "get_order", "arguments": "{}"}}}]}],
    [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {}}]}],
    {"type": "message", "role": "assistant", "content": [], "stop_reason": "tool_use"},
    [{"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": "{}"}],
    [{"role": "assistant", "content": [{"type": "text", "text": "Your order shipped."}]}],
    {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    {"status": "ok"},
    {"id": 7},
    0,
])
def test_turns_that_say_something_in_any_format_are_not_empty(output):
    assert rule_empty_output(view(span("c", output=output)))[0].verdict == "pass"


@pytest.mark.parametrize("output", [
    [{"role": "assistant", "content": None}],
    [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": None}, "finish_reason": "stop"}],
    {"choices": [{"message": {"role": "assistant", "content": "  "}}]},
    [{"role": "assistant", "content": [{"type": "text", "text": ""}], "stop_reason": "end_turn"}],
    [{"role": "assistant", "parts": []}],
    "   ",
])
def test_turns_with_no_text_and_no_tool_call_are_still_empty(output):
    (result,) = rule_empty_output(view(span("c", output=output)))
    assert (result.verdict, result.target_span_id) == ("fail", "c")


def _messages(value, out: list) -> None:
    value = maybe_json(value)
    if isinstance(value, list):
        for item in value:
            _messages(item, out)
    elif isinstance(value, dict):
        if value.get("role") == "assistant":
            out.append(value)
        for child in value.values():
            _messages(child, out)


def test_real_payloads_yield_no_empty_output_on_tool_call_turns(project, shared_dir):
    """The shared real-world payloads, through ingestion and a rules run; then every assistant turn that calls a
    tool anywhere in what they stored, judged as a span's whole output."""
    paths = sorted((shared_dir / "datasets" / "otel-samples").glob("*/*.otlp.json"))
    assert len(paths) >= 8
    for path in paths:
        ingest_otlp(project=project, body=Path(path).read_bytes(), content_type="application/json")
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, judges=["rules"], enqueue=False))
    assert run.status == "succeeded" and run.error_count == 0
    assert not Feedback.objects.filter(run=run, judge="rule.empty_output").exclude(verdict="pass").exists()

    turns: list[dict] = []
    for stored in Span.objects.filter(trace__project=project).values_list("input", "output"):
        for value in stored:
            _messages(value, turns)
    calling = [t for t in turns if any(p.get("type") == "tool_call" for p in t.get("parts") or [])
               or t.get("tool_calls") or t.get("function_call")]
    assert calling, "the samples hold tool-call turns (pydantic-ai)"
    for turn in calling:
        assert rule_empty_output(view(span("c", output=[turn])))[0].verdict == "pass", turn
