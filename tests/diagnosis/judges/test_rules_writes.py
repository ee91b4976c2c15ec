"""The judges that need one run per task (diagnosis/judges/rules/writes.py, calls.py), on hand-written traces shaped
like a tool-calling chat agent's (OpenInference: model turns and tool calls are siblings): each flags its case,
blames the model turn that issued the call, with evidence that verifies, and stays silent on a correct run."""

import json

from diagnosis.judges.rules import RULES
from diagnosis.judges.rules.calls import participles, rule_repeated_failing_call, rule_unbacked_claim
from diagnosis.judges.rules.closed import rule_write_on_closed_object
from diagnosis.judges.rules.writes import (
    rule_refused_write_retried,
    rule_unconfirmed_write,
    rule_ungrounded_write_argument,
)
from diagnosis.services.evidence import evidence_verify
from tests.diagnosis.support import span, view

BOOKING = {"booking_id": "BK-4471", "user": "ana_ruiz", "status": "confirmed", "cabin": "economy"}


def turn(span_id: str, at: float, inputs: list[tuple[str, str]], *, call: tuple[str, dict] | None = None,
         text: str = "", node: str = "desk"):
    """A model turn: the messages new since the last turn, then a text answer or one tool call."""
    message = {"role": "assistant", "content": text or None}
    if call is not None:
        message["tool_calls"] = [{"tool_call": {"function": {"name": call[0], "arguments": json.dumps(call[1])}}}]
    return span(span_id, kind="LLM", node=node, at=at, name="ChatCompletion",
                input=[{"role": role, "content": content} for role, content in inputs], output=[message])


def call(span_id: str, at: float, tool: str, arguments: dict, reply) -> object:
    return span(span_id, kind="TOOL", node="desk", at=at, name=tool, tool_name=tool, input=arguments,
                output=reply if isinstance(reply, str) else json.dumps(reply))


def booking_run(*, write_arguments: dict, confirm: str = "Yes, please cancel it.", looked_up: dict = BOOKING,
                write_reply=None, final: str = "Your booking BK-4471 is cancelled."):
    """The user asks to cancel BK-4471; the agent looks it up, asks, the user answers `confirm`, the agent writes."""
    reply = write_reply if write_reply is not None else {**looked_up, "status": "cancelled"}
    return view(
        turn("l1", 1, [("user", "Hi, I'm ana_ruiz and I want to cancel booking BK-4471.")],
             call=("get_booking", {"booking_id": "BK-4471"})),
        call("t1", 1.5, "get_booking", {"booking_id": "BK-4471"}, looked_up),
        turn("l2", 2, [("tool", json.dumps(looked_up))], text="I found BK-4471 (economy). Shall I cancel it?"),
        turn("l3", 3, [("user", confirm)], call=("cancel_booking", write_arguments)),
        call("t2", 3.5, "cancel_booking", write_arguments, reply),
        turn("l4", 4, [("tool", json.dumps(reply) if not isinstance(reply, str) else reply)], text=final),
        goal="Hi, I'm ana_ruiz and I want to cancel booking BK-4471.")


def _failing(results):
    return [r for r in results if r.verdict == "fail"]


def _flagged(rule, trace):
    (result,) = _failing(rule(trace))
    assert evidence_verify(trace=trace, results=[result]) == 0, [e for i in result.issues for e in i.evidence]
    return result


def _silent(rule, trace):
    results = rule(trace)
    assert not _failing(results) and len(results) == 1 and results[0].target_span_id is None, results


CORRECT = booking_run(write_arguments={"booking_id": "BK-4471", "reason": "change of plans"})


def test_every_new_judge_is_registered_and_silent_on_a_correct_run():
    for name in ("rule.ungrounded_write_argument", "rule.unconfirmed_write", "rule.write_on_closed_object",
                 "rule.repeated_failing_call", "rule.unbacked_claim", "rule.refused_write_retried"):
        _silent(RULES[name], CORRECT)


def test_ungrounded_write_argument_flags_a_value_nobody_gave_and_blames_the_turn():
    trace = booking_run(write_arguments={"booking_id": "BK-4417"})
    result = _flagged(rule_ungrounded_write_argument, trace)
    assert result.target_span_id == "l3" and result.details["call_span_id"] == "t2"
    assert result.details["values"] == ["BK-4417"]
    assert {e.span_id for e in result.issues[0].evidence} == {"l3", "t2"}


def test_ungrounded_write_argument_folds_case_and_separators_and_ignores_numbers_and_prose():
    trace = booking_run(write_arguments={"booking_id": "bk_4471", "refund_amount": 250,
                                         "note": "customer asked to cancel, refund to card"})
    _silent(rule_ungrounded_write_argument, trace)


def conversation_start():
    return turn("l0", 0, [("user", "Hello, I need help with a booking.")], text="Sure, which booking?")


def test_unconfirmed_write_flags_a_write_straight_after_a_tool_result():
    trace = view(
        conversation_start(),
        turn("l1", 1, [("user", "Cancel BK-4471 please.")], call=("get_booking", {"booking_id": "BK-4471"})),
        call("t1", 1.5, "get_booking", {"booking_id": "BK-4471"}, BOOKING),
        turn("l2", 2, [("tool", json.dumps(BOOKING))], call=("cancel_booking", {"booking_id": "BK-4471"})),
        call("t2", 2.5, "cancel_booking", {"booking_id": "BK-4471"}, {**BOOKING, "status": "cancelled"}))
    result = _flagged(rule_unconfirmed_write, trace)
    assert result.target_span_id == "l2" and result.details["tool"] == "cancel_booking"


def test_unconfirmed_write_reports_the_first_write_of_a_run_once():
    cancelled = {**BOOKING, "status": "cancelled"}
    trace = view(
        conversation_start(),
        turn("l1", 1, [("user", "Cancel BK-4471 please.")], call=("get_booking", {"booking_id": "BK-4471"})),
        call("t1", 1.5, "get_booking", {"booking_id": "BK-4471"}, BOOKING),
        turn("l2", 2, [("tool", json.dumps(BOOKING))], call=("cancel_booking", {"booking_id": "BK-4471"})),
        call("t2", 2.5, "cancel_booking", {"booking_id": "BK-4471"}, cancelled),
        turn("l3", 3, [("tool", json.dumps(cancelled))], call=("send_certificate", {"user": "ana_ruiz"})),
        call("t3", 3.5, "send_certificate", {"user": "ana_ruiz"}, {"certificate": "C-1"}))
    result = _flagged(rule_unconfirmed_write, trace)
    assert result.target_span_id == "l2" and result.details["calls_flagged"] == 2


def test_unconfirmed_write_leaves_a_retry_after_a_refusal_to_refused_write_retried():
    trace = refused_then(user_between=False)
    _silent(rule_unconfirmed_write, trace)
    assert _failing(rule_refused_write_retried(trace))


def test_unconfirmed_write_skips_a_run_with_no_user_in_the_loop():
    trace = view(
        turn("l1", 1, [("user", "Refund the duplicate charge on INV-9005.")],
             call=("get_invoice", {"invoice_id": "INV-9005"})),
        call("t1", 1.5, "get_invoice", {"invoice_id": "INV-9005"}, {"invoice_id": "INV-9005", "duplicate": True}),
        turn("l2", 2, [("tool", "{}")], call=("create_refund", {"invoice_id": "INV-9005"})),
        call("t2", 2.5, "create_refund", {"invoice_id": "INV-9005"}, {"refund": "ok"}))
    (result,) = rule_unconfirmed_write(trace)
    assert result.status == "skipped"


def test_a_pipeline_whose_agents_each_get_one_user_message_is_not_a_conversation():
    """The example agent's shape: the planner hears the customer once, the worker its instructions once; two user
    messages in the run, but nobody to confirm with (before the gate counted per agent and per turn, the writes
    judges ran on such runs once GenAI `parts` messages were read: 2 of 22 example runs flagged, none failing)."""
    ticket = "Refund the duplicate charge on INV-9005."
    trace = view(
        turn("p1", 1, [("user", ticket)], text="intent: refund", node="planner"),
        turn("l1", 2, [("user", f"Handle these requests from the customer's ticket: {ticket}")],
             call=("get_invoice", {"invoice_id": "INV-9005"}), node="billing_worker"),
        call("t1", 2.5, "get_invoice", {"invoice_id": "INV-9005"}, {"invoice_id": "INV-9005", "duplicate": True}),
        turn("l2", 3, [("tool", "{}")], call=("create_refund", {"invoice_id": "INV-9005"}), node="billing_worker"),
        call("t2", 3.5, "create_refund", {"invoice_id": "INV-9005"}, {"refund": "ok"}))
    # The example's writer: the ticket and a brief, two user messages in one turn.
    briefed = view(
        turn("l1", 1, [("user", ticket), ("user", "Brief: the invoice INV-9005 was charged twice.")],
             call=("get_invoice", {"invoice_id": "INV-9005"}), node="billing_worker"),
        call("t1", 1.5, "get_invoice", {"invoice_id": "INV-9005"}, {"invoice_id": "INV-9005", "duplicate": True}),
        turn("l2", 2, [("tool", "{}")], call=("create_refund", {"invoice_id": "INV-9005"}), node="billing_worker"),
        call("t2", 2.5, "create_refund", {"invoice_id": "INV-9005"}, {"refund": "ok"}))
    for run in (trace, briefed):
        for rule in (rule_unconfirmed_write, rule_refused_write_retried):
            (result,) = rule(run)
            assert result.status == "skipped", result
            assert "No agent that called a write received user messages in two turns" in result.critique


def test_unconfirmed_write_skips_turns_without_roles():
    trace = view(conversation_start(), turn("l0b", 0.5, [("user", "BK-4471.")], text="One moment."),
                 span("l1", kind="LLM", node="desk", at=1, input="cancel it", output="calling cancel_booking"),
                 call("t1", 1.5, "cancel_booking", {"booking_id": "BK-4471"}, {"ok": True}))
    (result,) = rule_unconfirmed_write(trace)
    assert result.status == "skipped"


def refused_then(*, user_between: bool):
    refusal = "Error: payment amount does not add up, total price is 305, but paid 255"
    first = {"booking_id": "BK-4471", "payment": [{"id": "gift_card_1", "amount": 255}]}
    second = {"booking_id": "BK-4471", "payment": [{"id": "gift_card_1", "amount": 305}]}
    between = [turn("l3", 3, [("tool", refusal)], text="The amounts do not add up: pay the rest by card?"),
               turn("l4", 4, [("user", "Put it all on the gift card.")], call=("update_booking", second))] \
        if user_between else [turn("l4", 4, [("tool", refusal)], call=("update_booking", second))]
    return view(
        conversation_start(),
        turn("l1", 1, [("user", "Add a bag to BK-4471.")], text="That is 305 in all; shall I charge it?"),
        turn("l2", 2, [("user", "Yes.")], call=("update_booking", first)),
        call("t1", 2.5, "update_booking", first, refusal),
        *between,
        call("t2", 4.5, "update_booking", second, {"booking_id": "BK-4471", "status": "confirmed"}))


def test_refused_write_retried_flags_a_workaround_without_the_user_and_blames_the_refused_step():
    trace = refused_then(user_between=False)
    result = _flagged(rule_refused_write_retried, trace)
    assert result.target_span_id == "l2" and result.details["retry_span_id"] == "t2"
    assert {e.span_id for e in result.issues[0].evidence} == {"l2", "t1", "l4", "t2"}


def test_refused_write_retried_is_silent_when_the_agent_went_back_to_the_user():
    _silent(rule_refused_write_retried, refused_then(user_between=True))


def test_write_on_closed_object_flags_a_change_to_what_the_lookup_said_is_cancelled():
    trace = booking_run(write_arguments={"booking_id": "BK-4471"}, looked_up={**BOOKING, "status": "cancelled"},
                        write_reply="Error: booking already cancelled")
    result = _flagged(rule_write_on_closed_object, trace)
    assert result.target_span_id == "l3" and result.details["status"] == "cancelled"
    assert result.details["read_span_id"] == "t1"
    assert any(e.span_id == "t1" and e.quote == "cancelled" for e in result.issues[0].evidence)


def test_write_on_closed_object_is_about_the_same_object_only():
    other = {**BOOKING, "booking_id": "BK-0001", "status": "cancelled"}
    trace = view(
        turn("l1", 1, [("user", "Cancel BK-4471.")], call=("list_bookings", {"user": "ana_ruiz"})),
        call("t1", 1.5, "list_bookings", {"user": "ana_ruiz"}, [other, BOOKING]),
        turn("l2", 2, [("user", "Yes.")], call=("cancel_booking", {"booking_id": "BK-4471"})),
        call("t2", 2.5, "cancel_booking", {"booking_id": "BK-4471"}, {**BOOKING, "status": "cancelled"}))
    _silent(rule_write_on_closed_object, trace)


def test_write_on_closed_object_reads_a_status_as_its_records_own():
    """A cancelled booking's record names its user (`user_id`): the user is not cancelled, and booking anew for them
    is not a write on a closed object. The booking itself, written to after, is."""
    # Keys in the order Postgres jsonb gives them back (shortest first): the user's id before the booking's.
    cancelled = {"status": "cancelled", "user_id": "ana_ruiz", "booking_id": "BK-0001"}
    new_booking = {"user_id": "ana_ruiz", "flight": "HA123"}
    trace = view(
        turn("l1", 1, [("user", "Cancel BK-0001 and book HA123 for me, ana_ruiz.")],
             call=("cancel_booking", {"booking_id": "BK-0001"})),
        call("t1", 1.5, "cancel_booking", {"booking_id": "BK-0001"}, cancelled),
        turn("l2", 2, [("user", "Yes, book it.")], call=("book_flight", new_booking)),
        call("t2", 2.5, "book_flight", new_booking, {**new_booking, "booking_id": "BK-0002", "status": "confirmed"}))
    _silent(rule_write_on_closed_object, trace)
    rebook = {"booking_id": "BK-0001", "flight": "HA123"}
    again = view(*trace.spans[:3],
                 turn("l2", 2, [("user", "Move it to HA123.")], call=("update_booking", rebook)),
                 call("t2", 2.5, "update_booking", rebook, {"booking_id": "BK-0001", "status": "cancelled"}))
    result = _flagged(rule_write_on_closed_object, again)
    assert result.target_span_id == "l2" and result.details["read_span_id"] == "t1"


def test_repeated_failing_call_flags_the_identical_retry_of_a_failed_call():
    failing = "Error: flight HA123 not available on 2024-05-13"
    arguments = {"booking_id": "BK-4471", "flight": "HA123"}
    trace = view(
        turn("l1", 1, [("user", "Move me to HA123.")], call=("update_booking", arguments)),
        call("t1", 1.5, "update_booking", arguments, failing),
        turn("l2", 2, [("tool", failing)], call=("update_booking", arguments)),
        call("t2", 2.5, "update_booking", arguments, failing))
    result = _flagged(rule_repeated_failing_call, trace)
    assert result.target_span_id == "l2" and result.details["first_failure_span_id"] == "t1"
    assert result.issues[0].severity == "high"


def test_repeated_failing_call_is_silent_when_the_retry_changes_the_arguments():
    failing = "Error: flight HA123 not available on 2024-05-13"
    trace = view(
        turn("l1", 1, [("user", "Move me to HA123.")], call=("update_booking", {"flight": "HA123"})),
        call("t1", 1.5, "update_booking", {"flight": "HA123"}, failing),
        turn("l2", 2, [("tool", failing)], call=("update_booking", {"flight": "HA124"})),
        call("t2", 2.5, "update_booking", {"flight": "HA124"}, {"ok": True}))
    _silent(rule_repeated_failing_call, trace)


def test_repeated_failing_call_is_silent_when_the_identical_retry_went_through():
    limited = {"error": "rate_limited", "retry_after": 1}
    trace = view(
        turn("l1", 1, [("user", "Refund INV-9005.")], call=("invoice_lookup", {"invoice_id": "INV-9005"})),
        call("t1", 1.5, "invoice_lookup", {"invoice_id": "INV-9005"}, limited),
        turn("l2", 2, [("tool", json.dumps(limited))], call=("invoice_lookup", {"invoice_id": "INV-9005"})),
        call("t2", 2.5, "invoice_lookup", {"invoice_id": "INV-9005"}, {"invoice_id": "INV-9005", "total": 9.0}))
    _silent(rule_repeated_failing_call, trace)


def test_unbacked_claim_flags_a_cancellation_the_failed_write_never_made():
    trace = booking_run(write_arguments={"booking_id": "BK-4471"}, write_reply="Error: payment service down",
                        final="All done: your booking BK-4471 has been successfully cancelled.")
    result = _flagged(rule_unbacked_claim, trace)
    assert result.target_span_id == "l4" and result.details["claimed"] == ["cancel"]
    assert {e.span_id for e in result.issues[0].evidence} >= {"l4", "t2"}


def test_unbacked_claim_is_silent_on_negations_and_on_runs_without_writes():
    trace = booking_run(write_arguments={"booking_id": "BK-4471"}, write_reply="Error: payment service down",
                        final="Sorry, your booking has not been cancelled: the payment service is down.")
    _silent(rule_unbacked_claim, trace)
    no_writes = view(turn("l1", 1, [("user", "Fix my script.")], text="I have updated the script for you."))
    _silent(rule_unbacked_claim, no_writes)


def test_participles_of_the_write_verbs():
    assert participles("cancel") == ("cancelled", "canceled")
    assert participles("update") == ("updated",)
    assert participles("modify") == ("modified",)
    assert "submitted" in participles("submit") and participles("send") == ("sent",)
