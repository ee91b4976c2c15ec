"""A tool's "not found" that the agent handled is a pass; one it did not handle still fails.

The criterion is diagnosis/judges/recovery.py's module docstring."""

import pytest

from diagnosis.judges.recovery import not_found_quote, recovered_not_found
from diagnosis.judges.rules.errors import rule_span_error, rule_tool_error
from diagnosis.services.evidence import evidence_verify
from tests.diagnosis.support import span, view

_NOT_FOUND = {"error": "not_found", "message": "No order with id O-5999"}


def _lookup(**fields):
    fields = {"kind": "TOOL", "tool_name": "order_lookup", "name": "execute_tool order_lookup", "parent": "w",
              "node": "orders_worker", "at": 1, **fields}
    return span("t", **fields)


def _error_lookup(**fields):
    return _lookup(status="error", status_message="no order O-5999", output=_NOT_FOUND,
                   attributes={"error.type": "not_found"},
                   exceptions=[{"type": "shop.NotFoundError", "message": "no order O-5999"}], **fields)


def _worker(**fields):
    return span("w", kind="AGENT", node="orders_worker", name="invoke_agent orders_worker", duration=5, **fields)


def _next_turn(**fields):
    return span("n", parent="w", node="orders_worker", output="No order O-5999: ask the customer to check it.", at=2,
                **fields)


def test_a_not_found_the_agent_recovers_from_is_a_pass_on_that_span():
    trace = view(_worker(), _error_lookup(), _next_turn())
    (result,) = rule_span_error(trace)
    assert (result.verdict, result.target_span_id, result.issues) == ("pass", "t", [])
    assert result.critique.startswith("Recovered not-found: execute_tool order_lookup (orders_worker) found nothing")
    assert result.details == {"recovered_not_found": True, "error": "not_found", "next_span_id": "n"}
    # The same not-found as an error payload on a span whose status says OK.
    ok = view(_worker(), _lookup(output=_NOT_FOUND), _next_turn())
    (result,) = rule_tool_error(ok)
    assert (result.verdict, result.target_span_id, result.details["error"]) == ("pass", "t", "not_found")


@pytest.mark.parametrize("case", ["last thing", "caller in error", "root in error", "outcome failure",
                                  "final answer is an error", "final answer empty", "next turn in error"])
def test_a_not_found_the_agent_does_not_recover_from_still_fails(case):
    worker = _worker(status="error", status_message="lookup failed") if case == "caller in error" else _worker()
    spans = [worker, _error_lookup()]
    if case != "last thing":
        spans.append(_next_turn(status="error") if case == "next turn in error" else _next_turn())
    trace = view(*spans)
    if case == "root in error":
        trace.spans[0].status = "error"
    trace.outcome = "failure" if case == "outcome failure" else None
    if case == "final answer is an error":
        trace.final_output = "NotFoundError: no order O-5999"
    if case == "final answer empty":
        trace.final_output = [{"role": "assistant", "content": ""}]
    failing = [r for r in rule_span_error(trace) if r.verdict == "fail"]
    # The unrecovered call is blamed on the agent that made it (judges/decision.py), citing the call.
    lookup = next(r for r in failing if r.target_span_id == "w")
    issue = next(i for i in lookup.issues if "NotFoundError" in i.title)
    assert "t" in [e.span_id for e in issue.evidence] and "w" in [e.span_id for e in issue.evidence]
    assert evidence_verify(trace=trace, results=[lookup]) == 0


def test_only_not_founds_of_tools_are_excused():
    # Other errors are faults even when the agent goes on.
    timeout = _lookup(status="error", status_message="upstream timed out",
                      exceptions=[{"type": "TimeoutError", "message": "upstream timed out"}])
    assert rule_span_error(view(_worker(), timeout, _next_turn()))[0].verdict == "fail"
    # A missing module or command is a broken environment, not an answer.
    for message in ("ModuleNotFoundError: No module named 'pandas'", "bash: jq: command not found"):
        broken = _lookup(status="error", status_message=message)
        assert not_found_quote(broken) is None
        assert rule_span_error(view(_worker(), broken, _next_turn()))[0].verdict == "fail"
    # A model call that 404s is a configuration error, whatever comes next.
    model = span("t", parent="w", at=1, status="error", status_message="404 model not found")
    assert rule_span_error(view(_worker(), model, _next_turn()))[0].verdict == "fail"


@pytest.mark.parametrize("fields, quote", [
    ({"status_message": "Customer C-9 does not exist"}, "Customer C-9 does not exist"),
    ({"attributes": {"http.response.status_code": 404}}, "404"),
    ({"exceptions": [{"type": "FileNotFoundError", "message": "[Errno 2] No such file or directory: 'a.csv'"}]},
     "FileNotFoundError"),
    ({"output": {"error": {"code": "NOT_FOUND", "message": "no record"}}},
     '{"code": "NOT_FOUND", "message": "no record"}'),
])
def test_not_found_in_any_error_carrier_is_recognised(fields, quote):
    tool = _lookup(status="error", **fields)
    assert not_found_quote(tool) == quote
    recovery = recovered_not_found(tool, view(_worker(), tool, _next_turn()))
    assert recovery is not None and recovery.next_span.span_id == "n"
