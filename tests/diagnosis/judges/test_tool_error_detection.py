"""Issue 28, item 1: a tool output that starts with "Error:" (after whitespace) or whose top-level JSON object has an
`error` member is a tool error even when the span's status is OK, and the finding names the tool and the error's
pattern (its message with the values taken out), so different errors are never one finding."""

import pytest

from diagnosis.judges.rules.errors import rule_span_error, rule_tool_error
from diagnosis.judges.text import error_pattern, error_payload
from tests.diagnosis.support import span, view


def _tool(output, *, tool="book_reservation", status="ok", span_id="t1", at=1.0, **fields):
    return span(span_id, kind="TOOL", name=tool, tool_name=tool, output=output, status=status, at=at, **fields)


@pytest.mark.parametrize("output", [
    "Error: payment amount does not add up, total price is 305, but paid 255",
    "  \n\t Error: payment amount does not add up, total price is 305, but paid 255",
    "error: payment amount does not add up, total price is 305, but paid 255",
])
def test_error_prefix_after_whitespace_is_a_tool_error_with_ok_status(output):
    assert error_payload(output).lower() == "error: payment amount does not add up, total price is 305, but paid 255"
    results = rule_tool_error(view(_tool(output)))
    assert [r.verdict for r in results] == ["fail"]
    assert results[0].target_span_id == "t1"
    assert results[0].issues[0].title == \
        "book_reservation returned an error: payment amount does not add up, total price is N, but paid N"
    assert results[0].issues[0].evidence[0].quote.lower().startswith("error: payment amount does not add up")


@pytest.mark.parametrize("output", [
    {"error": "flight HAT030 not available on date 2024-05-13"},
    '{"error": "flight HAT030 not available on date 2024-05-13", "code": 409}',
    ' {"error": {"message": "flight HAT030 not available on date 2024-05-13"}} ',
])
def test_top_level_json_error_member_is_a_tool_error(output):
    assert error_payload(output) is not None
    results = rule_tool_error(view(_tool(output, tool="update_reservation_flights")))
    assert [r.verdict for r in results] == ["fail"]
    title = results[0].issues[0].title
    assert title.startswith("update_reservation_flights returned an error: ")
    assert "HAT030" not in title and "2024" not in title and "<id>" in title and "<date>" in title


@pytest.mark.parametrize("output", [
    "Flight HAT030 booked for 2024-05-13; no error.",
    '{"reservation_id": "ZFA04Y", "status": "confirmed", "flights": [{"flight_number": "HAT030"}]}',
    "The error rate of the service is 0.1%, which is fine.",
    "",
])
def test_a_normal_output_is_not_a_tool_error(output):
    assert error_payload(output) is None
    assert [r.verdict for r in rule_tool_error(view(_tool(output)))] == ["pass"]


@pytest.mark.parametrize("output", [
    {"result": {"error": "flight HAT030 not available"}},
    '{"flights": [{"number": "HAT030", "error": "cancelled"}], "count": 1}',
    '{"error": null, "result": "ok"}',
])
def test_an_error_member_that_is_not_top_level_or_is_empty_is_not_a_tool_error(output):
    assert error_payload(output) is None
    assert [r.verdict for r in rule_tool_error(view(_tool(output)))] == ["pass"]


def test_error_pattern_takes_the_values_out_and_keeps_the_words():
    assert error_pattern("Error: flight HAT030 not available on date 2024-05-13") == \
        "flight <id> not available on date <date>"
    assert error_pattern("Error: flight HAT271 not available on date 2024-05-10") == \
        "flight <id> not available on date <date>"
    assert error_pattern("Error: payment method certificate_7504069 not found") == "payment method <id> not found"
    assert error_pattern("Error: payment method certificate_4856383 not found") == "payment method <id> not found"
    assert error_pattern("Error: payment amount does not add up, total price is 1,203, but paid 833.") == \
        "payment amount does not add up, total price is N, but paid N"
    assert error_pattern("KeyError: 'order_id'") == 'KeyError: "\u2026"'
    assert error_pattern("RateLimitedError: invoice service is rate limiting this account\nTraceback …") == \
        "RateLimitedError: invoice service is rate limiting this account"
    # different messages stay different
    assert error_pattern("Error: not enough seats on flight HAT290") != \
        error_pattern("Error: flight HAT290 not available on date 2024-05-13")
    # idempotent: a pattern is its own pattern
    for message in ("Error: flight HAT030 not available on date 2024-05-13", "KeyError: 'order_id'"):
        assert error_pattern(error_pattern(message)) == error_pattern(message)


def test_two_tools_or_two_errors_of_a_tool_get_different_titles_and_one_error_one_title():
    outputs = [("t1", "update_reservation_flights", "Error: flight HAT030 not available on date 2024-05-13"),
               ("t2", "update_reservation_flights", "Error: flight HAT223 not available on date 2024-05-14"),
               ("t3", "update_reservation_flights", "Error: not enough seats on flight HAT290"),
               ("t4", "book_reservation", "Error: not enough seats on flight HAT139")]
    trace = view(*[_tool(out, tool=tool, span_id=sid, at=i) for i, (sid, tool, out) in enumerate(outputs)])
    titles = {r.target_span_id: r.issues[0].title for r in rule_tool_error(trace)}
    assert titles["t1"] == titles["t2"] == \
        "update_reservation_flights returned an error: flight <id> not available on date <date>"
    assert titles["t3"] == "update_reservation_flights returned an error: not enough seats on flight <id>"
    assert titles["t4"] == "book_reservation returned an error: not enough seats on flight <id>"


def test_a_span_error_title_carries_its_message_pattern():
    failing = _tool("", tool="invoice_lookup", status="error",
                    status_message="invoice service is rate limiting account 4411",
                    exceptions=[{"type": "clients.RateLimitedError",
                                 "message": "invoice service is rate limiting account 4411"}])
    bare = _tool("", tool="order_lookup", status="error", span_id="t2", at=2.0, status_message="HTTP 503 from orders")
    titles = {r.target_span_id: r.issues[0].title for r in rule_span_error(view(failing, bare))}
    assert titles["t1"] == "invoice_lookup (agent) failed: RateLimitedError: invoice service is rate limiting account N"
    assert titles["t2"] == "order_lookup (agent) failed: HTTP N from orders"
