"""Issue 41, point 1: blame the decision. A failing tool call's statement cites the agent step (the LLM or AGENT span)
that issued it, with the call's arguments and the tool's reply as evidence; the insight's node is that agent; root
cause and recommendation say what it did and what it had in front of it.

Hand-written traces in the two shapes instrumentations emit (judges/decision.py): the tool span a child of the model
turn that called it, and the tool span a sibling after it (tau-bench's OpenInference traces, the example agent)."""

from __future__ import annotations

import json

import pytest

from diagnosis.judges.decision import decision_facts, deciding_step
from diagnosis.judges.rules.errors import rule_span_error, rule_tool_error
from diagnosis.judges.rules.repetition import rule_repeated_tool_call
from diagnosis.models import Feedback, Insight, InsightStatement
from diagnosis.services.evidence import evidence_verify
from tests.diagnosis.insights.conftest import diagnose
from tests.diagnosis.support import ingest_otlp, span, view
from traces.models import Span

BANNED = ("Start from", "Start at", "so that the rubric holds")
_T0 = 1_740_830_400_000_000_000
_S = 1_000_000_000


# ---------------------------------------------------------------------------------------------------------------
# the judges, on views


def _turn(span_id: str, tool: str, arguments: dict, *, parent: str = "root", at: float = 1.0) -> object:
    return span(span_id, parent=parent, kind="LLM", node="booking_agent", name="ChatCompletion", at=at, duration=0.5,
                output=[{"role": "assistant", "tool_calls": [
                    {"tool_call": {"function": {"name": tool, "arguments": json.dumps(arguments)}}}]}])


def _call(span_id: str, tool: str, arguments: dict, output, *, parent: str = "root", at: float = 2.0, **fields):
    return span(span_id, parent=parent, kind="TOOL", node="booking_agent", name=tool, tool_name=tool, at=at,
                duration=0.1, input=arguments, output=output, **fields)


def _root_agent():
    root = view().spans[0]
    root.node = root.name = "booking_agent"
    return root


@pytest.mark.parametrize("shape", ["child", "sibling"])
def test_a_failing_call_is_blamed_on_the_step_that_issued_it(shape):
    lookup_turn = _turn("l1", "get_reservation", {"reservation_id": "R1X9"}, at=1)
    lookup = _call("t1", "get_reservation", {"reservation_id": "R1X9"}, {"reservation_id": "R1X9",
                                                                         "status": "cancelled"},
                   parent="l1" if shape == "child" else "root", at=1.6)
    cancel_turn = _turn("l2", "cancel_reservation", {"reservation_id": "R1X9"}, at=3)
    cancel = _call("t2", "cancel_reservation", {"reservation_id": "R1X9"},
                   "Error: reservation R1X9 is already cancelled", parent="l2" if shape == "child" else "root",
                   at=3.6 if shape == "sibling" else 3.1)
    if shape == "child":  # the call runs inside the model turn that asked for it
        lookup.start_time, lookup.end_time = lookup_turn.start_time, lookup_turn.end_time
    trace = view(lookup_turn, lookup, cancel_turn, cancel)
    trace.spans[0] = _root_agent()
    assert deciding_step(cancel, trace).span_id == "l2"
    assert deciding_step(lookup, trace).span_id == "l1"

    (result,) = rule_tool_error(trace)
    assert result.verdict == "fail" and result.target_span_id == "l2"
    (issue,) = result.issues
    assert issue.title == "cancel_reservation returned an error: reservation <id> is already cancelled"
    cited = [(e.span_id, e.quote) for e in issue.evidence]
    assert cited[:3] == [("l2", "cancel_reservation"), ("t2", '{"reservation_id": "R1X9"}'),
                         ("t2", "Error: reservation R1X9 is already cancelled")]
    assert "booking_agent (ChatCompletion) called `cancel_reservation`" in issue.detail
    assert evidence_verify(trace=trace, results=[result]) == 0  # every quote occurs in the span it cites

    # What the agent did and had in front of it: the last lookup of that booking said it was cancelled.
    facts = decision_facts(trace=trace, span_id="l2", evidence=cited)
    assert facts.step.span_id == "l2" and facts.who == "booking_agent (ChatCompletion)"
    assert facts.saw == "`get_reservation`'s last reply about `R1X9`: `status: cancelled`"
    assert "before it calls `cancel_reservation`" in facts.advice
    assert not any(phrase in facts.advice for phrase in BANNED)


def test_the_sibling_that_names_the_tool_decides_and_another_agents_turn_never_does():
    named = _turn("l1", "book_flight", {"flight": "HAT1"}, at=1)
    chatter = span("l2", kind="LLM", node="booking_agent", name="ChatCompletion", at=2, duration=0.2,
                   output="Let me book that.")
    other = span("o1", kind="LLM", node="pricing_agent", name="ChatCompletion", at=2.5, duration=0.2,
                 output="book_flight")
    call = _call("t1", "book_flight", {"flight": "HAT1"}, "Error: payment declined", at=3)
    trace = view(named, chatter, other, call)
    trace.spans[0] = _root_agent()
    assert deciding_step(call, trace).span_id == "l1"
    # No model turn of the call's agent before it: the enclosing agent span decided.
    alone = view(_call("t1", "book_flight", {"flight": "HAT1"}, "Error: payment declined", at=3))
    alone.spans[0] = _root_agent()
    assert deciding_step(alone.spans[1], alone).span_id == "root"
    # A span error and a repeated call of one step are one result each, on that step.
    retries = [_call(f"r{i}", "book_flight", {"flight": "HAT1"}, {"error": "rate_limited"}, at=3 + i,
                     status="error", status_message="rate limited") for i in range(3)]
    looped = view(named, *retries)
    looped.spans[0] = _root_agent()
    (error,) = rule_span_error(looped)
    assert error.target_span_id == "l1" and len(error.issues) == 1
    assert {e.span_id for e in error.issues[0].evidence} == {"l1", "r0", "r1", "r2"}
    (repeat,) = rule_repeated_tool_call(looped)
    assert repeat.target_span_id == "l1"
    assert evidence_verify(trace=looped, results=[error, repeat]) == 0


# ---------------------------------------------------------------------------------------------------------------
# through ingestion, statements and insights


def _attrs(values: dict) -> list[dict]:
    return [{"key": k, "value": {"stringValue": v if isinstance(v, str) else json.dumps(v)}} for k, v in
            values.items()]


def _otlp_span(trace_id: str, span_id: str, parent: str, name: str, start: float, end: float, attrs: dict) -> dict:
    return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": name,
            "startTimeUnixNano": str(int(_T0 + start * _S)), "endTimeUnixNano": str(int(_T0 + end * _S)),
            "attributes": _attrs(attrs), "status": {"code": 0}}


def _otlp_trace(index: int, shape: str, *, failed: bool) -> dict:
    trace_id = f"{index:032x}"
    ids = [f"{index:08x}{n:08x}" for n in range(6)]
    booking = f"R{index}X{index}"

    def turn(n: int, tool: str, start: float) -> dict:
        return _otlp_span(trace_id, ids[n], ids[0], "ChatCompletion", start, start + 0.5, {
            "openinference.span.kind": "LLM", "input.value": "Help the customer.",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": tool,
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
                json.dumps({"reservation_id": booking})})

    def call(n: int, tool: str, parent: str, start: float, output: str) -> dict:
        return _otlp_span(trace_id, ids[n], parent, tool, start, start + 0.1, {
            "openinference.span.kind": "TOOL", "tool.name": tool,
            "input.value": json.dumps({"reservation_id": booking}), "output.value": output})

    root = _otlp_span(trace_id, ids[0], "", "booking_agent", 0, 10, {
        "openinference.span.kind": "AGENT", "agent.name": "booking_agent",
        "input.value": f"Please cancel reservation {booking}.", "output.value": "Done.",
        "clear.outcome": "failure" if failed else "success", "clear.task.id": f"task-{index}"})
    lookup, cancel = turn(1, "get_reservation", 1), turn(3, "cancel_reservation", 3)
    child = shape == "child"
    status = "cancelled" if failed else "active"
    spans = [root, lookup, call(2, "get_reservation", ids[1] if child else ids[0], 1.1 if child else 1.6,
                                json.dumps({"reservation_id": booking, "status": status})), cancel,
             call(4, "cancel_reservation", ids[3] if child else ids[0], 3.1 if child else 3.6,
                  f"Error: reservation {booking} is already cancelled" if failed else json.dumps({"ok": True}))]
    return {"resourceSpans": [{"resource": {"attributes": _attrs({"service.name": "booking"})},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}


@pytest.mark.django_db
@pytest.mark.parametrize("shape", ["child", "sibling"])
def test_the_statement_cites_the_deciding_step_and_the_insight_is_its_agents(project, settings, shape):
    settings.CLEAR_JUDGE_MODEL = ""
    for index in range(1, 13):
        body = json.dumps(_otlp_trace(index, shape, failed=index <= 4)).encode()
        ingest_otlp(project=project, body=body, content_type="application/json")
    run = diagnose(project, "", judges=["rule.span_error", "rule.tool_error", "rule.repeated_tool_call"])

    kinds = {(s.trace.trace_id, s.span_id): (s.kind, s.node, s.name) for s in
             Span.objects.filter(trace__project=project).select_related("trace")}
    failing = list(Feedback.objects.filter(run=run, judge="rule.tool_error", verdict="fail").select_related("trace"))
    assert len(failing) == 4
    for feedback in failing:
        assert kinds[(feedback.trace.trace_id, feedback.target_span_id)] == ("LLM", "booking_agent",
                                                                              "ChatCompletion")
    statements = InsightStatement.objects.filter(run=run, judge="rule.tool_error").select_related("trace")
    assert statements.count() == 4
    for statement in statements:
        assert kinds[(statement.trace.trace_id, statement.span_id)][0] == "LLM"
        assert statement.node == "booking_agent"
        assert "booking_agent (ChatCompletion) called `cancel_reservation`" in statement.text

    insight = Insight.objects.get(project=project, level=Insight.Level.NODE, is_other=False,
                                  title__startswith="cancel_reservation returned an error")
    assert insight.node == "booking_agent"
    assert insight.root_cause.startswith("booking_agent (ChatCompletion) called `cancel_reservation` with "), \
        insight.root_cause
    # What it had in front of it, computed from the spans: the lookup of the same booking said it was cancelled.
    assert "It had in front of it `get_reservation`'s last reply about `R" in insight.root_cause, insight.root_cause
    assert "`: `status: cancelled`." in insight.root_cause, insight.root_cause
    assert "Make booking_agent (ChatCompletion) check `get_reservation`'s reply" in insight.recommendation, \
        insight.recommendation
    assert not any(phrase in insight.recommendation for phrase in BANNED)


# ---------------------------------------------------------------------------------------------------------------
# the demo's planted bugs (examples/support_desk/BUGS.md)

DECIDER = {"mediator_race": "mediator", "misroute": "planner", "retry_loop": "billing_worker"}


@pytest.mark.django_db
def test_the_demos_bugs_cite_the_deciding_agents_steps_and_no_recommendation_says_where_to_start(project, settings):
    from diagnosis.tickets.models import Ticket
    from tests.diagnosis.insights.conftest import TOUCHED_BY, demo_diagnose, held, tasks_of

    run = demo_diagnose(project, settings)
    spans = {(t, s): (kind, node) for t, s, kind, node in
             Span.objects.filter(trace__project=project).values_list("trace_id", "span_id", "kind", "node")}
    insights = [i for i in Insight.objects.filter(project=project, is_other=False, occurrences__run=run).distinct()
                if i.failure_association == "associated"]
    for bug, node in DECIDER.items():
        found = [i for i in insights if tasks_of(i, run) and tasks_of(i, run) <= TOUCHED_BY[bug]]
        assert found, bug
        cited = {spans.get((s.trace_id, s.span_id)) for i in found for s in held(i, run) if s.span_id}
        assert ("LLM", node) in cited or ("AGENT", node) in cited, (bug, cited)
        # Every rule finding about a tool call cites the step that made it, never the tool span.
        for insight in found:
            for statement in held(insight, run).filter(judge__startswith="rule."):
                assert spans[(statement.trace_id, statement.span_id)][0] in ("LLM", "AGENT"), statement.text
    retry = next(i for i in insights if i.level == Insight.Level.NODE and i.node == "billing_worker")
    # What the agent did and had in front of it, from the spans: it repeated a call the tool had just refused.
    assert "billing_worker (chat gpt-4o-mini) called `invoice_lookup`" in retry.root_cause, retry.root_cause
    assert "It had in front of it the same call's earlier reply `rate_limited`" in retry.root_cause, retry.root_cause
    texts = [i.recommendation for i in Insight.objects.filter(project=project)]
    texts += [t.suggested_fix.get("text", "") for t in Ticket.objects.filter(project=project)]
    for text in texts:
        assert not any(phrase in text for phrase in BANNED), text
