"""Issue 41, items 2, 3 and 5, on hand-written traces run through the rule judges and the insights build in-process.

* Recovered errors (diagnosis/judges/recovery.py): an error the run got past (the same tool later succeeding with
  other arguments, or another call returning the entity a not-found was after) is a low-severity finding under a
  passing verdict, whatever the run's outcome; it stays in its error's one insight, which says "recovered in N of M
  runs"; a pattern recovered in every run gets no ticket unless its recovered runs are themselves associated with
  failure (a retry that went through with wrong arguments).
* A recurring tool error associated with failure is a titled insight with a ticket, never "Other" (clustering/
  promote.py), even with fewer statements than a cluster needs.
* A tool returning one same empty output on at least 20 calls is by design on a project of failed runs only; a tool
  that errors on every call is not (insights/facts.py `insight_by_design`).
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.judges.rules.errors import rule_span_error, rule_tool_error
from diagnosis.models import Feedback, Insight, InsightStatement
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import diagnose
from tests.diagnosis.support import ingest_otlp, span, view
from tests.frontend.conftest import client_for

# The error and output-property rules: other judges' findings on the same calls (a write's arguments) would join the
# error's insight when they occur in the same traces (insights/METHOD.md "One problem, one insight").
JUDGES = ["rule.span_error", "rule.tool_error", "rule.exit_code", "rule.empty_output", "rule.truncated_output"]
T0 = 1_764_547_200_000_000_000
SECOND = 1_000_000_000

# ---------------------------------------------------------------------------------------------------------------
# The judges: a recovered error, whatever the run's outcome


def _tool(span_id: str, tool: str, arguments: dict, output, at: float, **fields):
    return span(span_id, kind="TOOL", tool_name=tool, name=tool, parent="w", node="desk", at=at,
                input=json.dumps(arguments), output=output if isinstance(output, str) else json.dumps(output),
                **fields)


def _worker():
    return span("w", kind="AGENT", node="desk", name="invoke_agent desk", duration=30)


def test_a_not_found_recovered_in_a_failed_run_is_recovered():
    # The user gave a wrong id; the agent found the customer by e-mail; the run failed later for another reason.
    trace = view(_worker(),
                 _tool("t1", "get_user_details", {"user_id": "sara_doe_123"}, "Error: user not found", 1),
                 span("n1", parent="w", node="desk", at=2, output="Let me look you up by e-mail."),
                 _tool("t2", "find_user_id_by_email", {"email": "sara@example.com"}, "sara_doe_496", 3),
                 _tool("t3", "cancel_reservation", {"reservation_id": "ABC123"}, "Error: cannot cancel", 5))
    trace.outcome = "failure"
    results = {r.target_span_id: r for r in rule_tool_error(trace)}
    recovered = results["t1"]
    assert (recovered.verdict, recovered.details["recovered"], recovered.details["recovered_by"]) == \
        ("pass", True, "t2")
    assert recovered.details["recovered_how"] == "found"
    assert [(i.title, i.severity) for i in recovered.issues] == [("get_user_details returned an error: user not "
                                                                   "found", "low")]
    # The later error nothing recovered still fails.
    assert not any(r.details.get("recovered") for r in results.values() if r.target_span_id != "t1")
    assert any(r.verdict == "fail" for r in results.values())

    # The same tool succeeding on a corrected argument is a recovery too, an identical retry is not.
    corrected = view(_worker(), _tool("t1", "get_order", {"order_id": "O-1"}, {"error": "order not found"}, 1),
                     _tool("t2", "get_order", {"order_id": "O-7"}, {"id": "O-7"}, 3))
    corrected.outcome = "failure"
    (result, *_) = [r for r in rule_tool_error(corrected) if r.target_span_id == "t1"]
    assert result.details["recovered_how"] == "corrected" and result.verdict == "pass"
    retried = view(_worker(), _tool("t1", "get_order", {"order_id": "O-1"}, "", 1, status="error",
                                    status_message="rate limited"),
                   _tool("t2", "get_order", {"order_id": "O-1"}, {"id": "O-1"}, 3))
    assert all(r.verdict == "fail" and not r.details.get("recovered") for r in rule_span_error(retried))


# ---------------------------------------------------------------------------------------------------------------
# Insights built from hand-written runs


def _attrs(**values) -> list[dict]:
    return [{"key": k.replace("__", "."), "value": {"stringValue": v}} for k, v in values.items()]


def _otlp(n: int, *, failed: bool, calls: list[tuple]) -> bytes:
    """One run: a root agent, a worker agent, and its tool calls (tool, arguments, output, in error) in order."""
    trace_id = f"{n + 1:032x}"
    base = (n + 1) * 1000
    root, worker = f"{base:016x}", f"{base + 1:016x}"

    def one(index: int, parent: str, name: str, kind: str, at: int, error: bool = False, **attributes) -> dict:
        out = {"traceId": trace_id, "spanId": f"{index:016x}", "name": name, "kind": 1,
               "startTimeUnixNano": str(T0 + at * SECOND), "endTimeUnixNano": str(T0 + at * SECOND + SECOND // 2),
               "attributes": _attrs(openinference__span__kind=kind, **attributes),
               "status": {"code": 2, "message": "RuntimeError: backend down"} if error else {"code": 0}}
        if parent:
            out["parentSpanId"] = parent
        return out

    spans = [one(base, "", "desk", "AGENT", 0, agent__name="desk", input__value=f"Request {n}",
                 output__value="Done.", clear__outcome="failure" if failed else "success", clear__task__id=f"t-{n}"),
             one(base + 1, root, "worker", "AGENT", 1, agent__name="worker", output__value="worker done")]
    for k, (tool, arguments, output, error) in enumerate(calls):
        extra = {"output__value": output} if output is not None else {}
        spans.append(one(base + 2 + k, worker, tool, "TOOL", 2 + 2 * k, error, tool__name=tool,
                         input__value=json.dumps(arguments), **extra))
    document = {"resourceSpans": [{"resource": {"attributes": _attrs(service__name="recovery-agent")},
                                   "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}
    return json.dumps(document).encode()


def _ingest(project, runs: list[tuple[bool, list[tuple]]]):
    for n, (failed, calls) in enumerate(runs):
        ingest_otlp(project=project, body=_otlp(n, failed=failed, calls=calls), content_type="application/json")


def _insight(project, word: str) -> Insight:
    found = [i for i in Insight.objects.filter(project=project, level="node", is_other=False) if word in i.title]
    assert len(found) == 1, [(i.node, i.title, i.is_other) for i in Insight.objects.filter(project=project)]
    return found[0]


def _wrong_id_then_found(n: int) -> tuple:
    return [("get_order", {"order_id": f"O-{n}x"}, "Error: order not found", False),
            ("get_order", {"order_id": f"O-{n}"}, json.dumps({"id": f"O-{n}", "status": "shipped"}), False)]


def _paid_wrong_then_through(n: int) -> tuple:
    return [("pay", {"amount": 10, "card": f"c-{n}"}, "Error: payment amount does not add up", False),
            ("pay", {"amount": 12, "card": f"c-{n}"}, json.dumps({"paid": 12}), False)]


@pytest.mark.django_db
def test_a_recovered_only_pattern_gets_no_ticket_unless_its_recoveries_fail(project, owner, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    runs = []
    for n in range(24):
        failed = n < 12
        calls = list(_wrong_id_then_found(n)) if n % 2 == 0 else []  # 6 failing, 6 succeeding runs
        if n < 10 or n == 12:  # the "successful" retry with wrong arguments: 10 failing runs, 1 succeeding
            calls += _paid_wrong_then_through(n)
        calls.append(("note", {"text": f"n{n}"}, "ok", False))
        runs.append((failed, calls))
    _ingest(project, runs)
    run = diagnose(project, "", judges=JUDGES)
    recovered = Feedback.objects.filter(run=run, details__recovered=True)
    assert recovered.count() == 12 + 11 and set(recovered.values_list("verdict", flat=True)) == {"pass"}

    # Recovered in every run, as often in succeeding runs as in failing ones: no problem, so no titled insight and no
    # ticket; its statements wait in the node's "other" bucket, which says they were recovered.
    assert not Insight.objects.filter(project=project, is_other=False, title__contains="get_order").exists()
    lookup = Insight.objects.get(project=project, level="node", node="worker", is_other=True)
    assert InsightStatement.objects.filter(node_insight=lookup, text__contains="get_order").count() == 12
    assert not Ticket.objects.filter(project=project, insight=lookup).exists()

    paid = _insight(project, "pay returned an error")
    assert paid.failure_association == "associated"  # its recovered runs fail: a retry that went wrong
    assert Ticket.objects.filter(project=project, insight=paid).exists()

    key = api_key_create(project=project, name="recovered", created_by=owner)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    body = api.get(f"/api/v1/insights/{paid.pk}/").json()
    assert body["recovered"] == {"count": 11, "of": 11, "failing": 10, "succeeding": 1, "lift_on": "recovered"}
    assert body["severity"] == "low"
    rows = {row["id"]: row for row in api.get("/api/v1/insights/?page_size=100&level=node").json()["results"]}
    assert rows[lookup.pk]["recovered"] == {"count": 12, "of": 12, "failing": 6, "succeeding": 6,
                                            "lift_on": "recovered"}
    page = client_for(owner).get(f"/p/{project.slug}/insights/{paid.pk}/").content.decode()
    assert "recovered in 11 of 11 runs" in page


@pytest.mark.django_db
def test_an_associated_tool_error_is_a_titled_ticketed_insight_not_other(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    runs = []
    for n in range(30):
        failed = n < 5
        calls = [("get_order", {"order_id": f"O-{n}"}, json.dumps({"id": f"O-{n}"}), False)]
        if n < 2:  # two failing runs: too few statements for a cluster, and associated with failure
            calls.append(("update_order", {"order_id": f"O-{n}"},
                          "Error: order is locked by an earlier write", False))
        if n == 7:  # once, in a succeeding run: not recurring, stays in "other"
            calls.append(("refund", {"order_id": f"O-{n}"}, "Error: refund window closed", False))
        runs.append((failed, calls))
    _ingest(project, runs)
    diagnose(project, "", judges=JUDGES)
    locked = _insight(project, "update_order returned an error")
    assert locked.title.startswith("update_order returned an error: order is locked")
    assert (locked.trace_count, locked.failure_association) == (2, "associated")
    assert Ticket.objects.filter(project=project, insight=locked).exists()
    in_other = InsightStatement.objects.filter(node_insight__is_other=True) | \
        InsightStatement.objects.filter(system_insight__is_other=True)
    assert not in_other.filter(text__contains="locked").exists()
    assert in_other.filter(text__contains="refund window").exists()


@pytest.mark.django_db
def test_a_constant_empty_tool_is_by_design_on_a_failed_only_project(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    runs = []
    for n in range(24):
        runs.append((True, [("think", {"thought": f"step {n}"}, "", False),
                            ("flaky", {"seat": f"{n}A"}, None, True),
                            ("get_order", {"order_id": f"O-{n}"}, json.dumps({"id": f"O-{n}"}), False)]))
    _ingest(project, runs)
    diagnose(project, "", judges=JUDGES)
    think = _insight(project, "think")
    assert think.by_design and think.failure_association == "not_associated"
    assert not Ticket.objects.filter(project=project, insight=think).exists()
    flaky = [i for i in Insight.objects.filter(project=project, is_other=False) if "flaky" in i.title]
    assert flaky and not any(i.by_design for i in flaky)
    assert {i.failure_association for i in flaky} == {"unknown"}
    assert Ticket.objects.filter(project=project, insight__in=flaky).exists()


def test_the_lift_of_a_partly_recovered_error_is_computed_where_it_was_not_recovered():
    from diagnosis.clustering.stats import TraceInfo, issue_stats, lift_traces

    # 20 failing and 20 succeeding runs; the error in 8 failing runs unrecovered, and recovered in 2 failing and 10
    # succeeding runs: counted together it is barely associated, on its unrecovered runs it is.
    traces = {f"f{i}": TraceInfo(failed=True) for i in range(20)} | {f"s{i}": TraceInfo(failed=False)
                                                                     for i in range(20)}
    unrecovered = {f"f{i}" for i in range(8)}
    recovered = {"f8", "f9"} | {f"s{i}" for i in range(10)}
    stats = issue_stats(unrecovered | recovered, traces, recovered_trace_ids=recovered)
    assert (stats.count, stats.recovered, stats.lift_on) == (20, 12, "unrecovered")
    assert stats.lift_ci[0] > 1 and stats.failure_rate_with == 1.0
    assert issue_stats(unrecovered | recovered, traces).lift_ci[0] < 1  # all together: not associated
    # Recovered everywhere: the recovered runs' lift, associated only when they fail more.
    assert lift_traces(recovered, recovered, traces)[1] == "recovered"
    assert issue_stats(recovered, traces, recovered_trace_ids=recovered).lift_ci[0] < 1
