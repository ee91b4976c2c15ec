"""A recovered error is the deciding agent's, like the same error's unrecovered occurrences: one problem, one
insight, whichever SDK recorded the run.

The Langfuse SDK's `@observe()` records a tool function as a plain span whose stored node is its own name (the
otel-samples expectation), and the judges see it as the calling turn's tool call (diagnosis/judges/tool_calls.py).
A recovered error's feedback sits on the failed call (one Feedback per target), as a contrastive finding sits on its
evidence span, so their statements took the tool's own node: on tau-airline re-encoded that way (`benchmarks/insights_real --format langfuse_spans`) one error was a node
insight at `book_reservation` and a system insight beside the deciding agent's, with "Other feedback at
<tool>" buckets: the open list was 7-11 against 3-6 as recorded."""

from __future__ import annotations

import json

import pytest

from benchmarks.insights_real.formats import reencode
from diagnosis.judges.rules.errors import rule_tool_error
from diagnosis.models import Feedback, Insight, InsightStatement
from diagnosis.services.trace_view import trace_view_build
from tests.diagnosis.insights.conftest import diagnose
from tests.diagnosis.support import ingest_otlp
from traces.models import Trace

JUDGES = ["rule.span_error", "rule.tool_error", "rule.exit_code", "rule.empty_output", "rule.truncated_output"]
T0 = 1_764_547_200_000_000_000
SECOND = 1_000_000_000
ERROR = "Error: payment amount does not add up, total price is 120, but paid 100"


def _attrs(values: dict) -> list[dict]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]


def _openinference_run(n: int, *, failed: bool, amounts: list[int]) -> dict:
    """A support agent (OpenInference, as tau-airline records it): each model turn calls `pay`, the tool replies."""
    trace_id, base = f"{n + 1:032x}", (n + 1) * 1000
    root = f"{base:016x}"

    def one(index: int, name: str, at: int, **attributes) -> dict:
        return {"traceId": trace_id, "spanId": f"{index:016x}", "name": name, "kind": 1,
                **({"parentSpanId": root} if index != base else {}),
                "startTimeUnixNano": str(T0 + at * SECOND), "endTimeUnixNano": str(T0 + at * SECOND + SECOND // 2),
                "attributes": _attrs(attributes), "status": {"code": 0}}

    spans = [one(base, "desk_agent", 0, **{"openinference.span.kind": "AGENT", "agent.name": "desk_agent",
                                            "clear.outcome": "failure" if failed else "success",
                                            "clear.task.id": f"task-{n}"})]
    for k, amount in enumerate(amounts):
        arguments = json.dumps({"order_id": f"O-{n}", "amount": amount})
        spans.append(one(base + 1 + 2 * k, "ChatCompletion", 1 + 2 * k, **{
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
            "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": f"Pay order O-{n}.",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": f"call-{k}",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "pay",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": arguments}))
        reply = ERROR if amount != 120 else json.dumps({"order_id": f"O-{n}", "paid": 120})
        spans.append(one(base + 2 + 2 * k, "pay", 2 + 2 * k, **{
            "openinference.span.kind": "TOOL", "tool.name": "pay", "input.value": arguments, "output.value": reply}))
    return {"resourceSpans": [{"resource": {"attributes": _attrs({"service.name": "desk"})},
                               "scopeSpans": [{"scope": {"name": "openinference"}, "spans": spans}]}]}


def _runs() -> list[dict]:
    # Six failing runs: four paid wrong then corrected the amount (recovered), two gave up after the error; six
    # succeeding runs paid right at once.
    runs = [_openinference_run(n, failed=True, amounts=[100, 120]) for n in range(4)]
    runs += [_openinference_run(n, failed=True, amounts=[100]) for n in range(4, 6)]
    runs += [_openinference_run(n, failed=False, amounts=[120]) for n in range(6, 12)]
    return runs


@pytest.mark.django_db
@pytest.mark.parametrize("shape", ["as-recorded", "langfuse_spans"])
def test_a_recovered_error_is_in_the_deciding_agents_insight(project, settings, shape):
    settings.CLEAR_JUDGE_MODEL = ""
    for request in _runs():
        body = request if shape == "as-recorded" else reencode(request, shape)
        ingest_otlp(project=project, body=json.dumps(body).encode(), content_type="application/json")

    # The judge: the recovered call carries its node as the judges see it, its caller's.
    view = trace_view_build(trace=Trace.objects.get(project=project, trace_id=f"{1:032x}"))
    (recovered,) = [r for r in rule_tool_error(view) if r.details.get("recovered")]
    caller = next(s for s in view.spans if s.kind == "LLM")
    assert (recovered.target_span_id, recovered.details["node"]) == (f"{1002:016x}", caller.node)

    run = diagnose(project, "", judges=[*JUDGES, "contrastive"])
    assert Feedback.objects.filter(run=run, details__recovered=True).count() == 4
    # The contrastive judge's finding on the same calls ("fails more often when `pay` fails") sits on a tool span too.
    assert Feedback.objects.filter(run=run, judge="contrastive", verdict="fail").exists()
    assert not InsightStatement.objects.filter(run=run, node="pay").exists()
    statements = InsightStatement.objects.filter(run=run, text__contains="pay returned an error")
    assert statements.count() == 6
    deciders = {s.node for s in statements}
    assert len(deciders) == 1 and "pay" not in deciders, deciders  # the agent's node, never the tool's own
    # One problem, one insight: both the recovered and the unrecovered occurrences, nothing left in "other".
    assert len(set(statements.values_list("node_insight", flat=True))) == 1
    insight = Insight.objects.get(pk=statements.first().node_insight_id)
    # (the error's insight, or the contrastive finding's on the same traces: METHOD.md "One problem, one insight")
    assert not insight.is_other and "pay" in insight.title, insight.title
    assert not Insight.objects.filter(project=project, node="pay").exists()
