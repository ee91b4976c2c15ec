"""The example agent's three planted bugs, found without a model: rule judges plus rubrics made with rubric_create.

The spans go through the ingestion service exactly as the OTLP endpoint would store them (tests/diagnosis/support.py).
Each bug is found on exactly the tasks BUGS.md says it touches, with evidence citing the span where it shows; a run
over the same suite without bugs finds none of them.
"""

import pytest

from diagnosis.judges.text import normalise, value_text
from diagnosis.models import Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start, rubric_create
from diagnosis.services.evidence import span_text
from diagnosis.services.trace_view import trace_view_build
from tests.diagnosis.support import support_desk_ingest
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db

TOUCHED_BY = {
    "mediator_race": {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"},
    "retry_loop": {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"},
    "misroute": {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"},
}


@pytest.fixture
def rubrics(project):
    return {
        "coverage": rubric_create(
            project=project, name="The mediator keeps every fact a tool returned", kind="coverage",
            config={"path": ["$.order_id", "$.tracking_number", "$.invoice_id", "$.articles[*].id"],
                    "sources": {"kind": "TOOL"}, "target": {"node": "mediator", "kind": "LLM"}},
        ),
        "never": rubric_create(
            project=project, name="Refund tickets are not answered from the order records", kind="tool_never",
            config={"tool": "order_lookup", "when": {"goal_regex": r"\brefund"}},
        ),
        "order": rubric_create(
            project=project, name="A refund for an order looks the refund up", kind="tool_order",
            config={"first": "refund_lookup", "when": {"goal_regex": r"refund.*\bO-\d+|\bO-\d+.*refund"}},
        ),
    }


def _run(project, release):
    run = diagnosis_run_start(project=project, release=release, enqueue=False)
    return diagnosis_run_execute(run=run)


def _failing_tasks(run, judge):
    return {f.trace.task_id for f in Feedback.objects.filter(run=run, judge=judge, verdict="fail").select_related(
        "trace")}


def test_each_planted_bug_yields_failing_feedback_with_evidence(project, rubrics, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", release="r1")
    support_desk_ingest(project=project, bugs="none", release="r2")
    run = _run(project, "r1")
    assert run.status == "succeeded" and run.total_count == 22 and run.error_count == 0
    assert run.dropped_evidence == 0
    assert not Feedback.objects.filter(run=run, judge_kind="llm").exists()
    coverage, never, order = (rubrics[k].judge_name for k in ("coverage", "never", "order"))

    # mediator_race: the mediator's brief lacks a value a tool returned; quoted from that tool's span.
    assert _failing_tasks(run, coverage) == TOUCHED_BY["mediator_race"]
    for feedback in Feedback.objects.filter(run=run, judge=coverage, verdict="fail"):
        target = Span.objects.get(trace=feedback.trace, span_id=feedback.target_span_id)
        assert (target.node, target.kind) == ("mediator", "LLM")
        assert feedback.rubric_id == rubrics["coverage"].pk and feedback.judge_kind == "rubric"
        for issue in feedback.issues:
            (evidence,) = issue["evidence"]
            source = Span.objects.get(trace=feedback.trace, span_id=evidence["span_id"])
            assert source.kind == "TOOL" and evidence["quote"] in value_text(source.output)
            assert normalise(evidence["quote"]) not in normalise(value_text(target.output))
            assert normalise(evidence["quote"]) in normalise(value_text(target.input))  # it arrived, then was lost

    # retry_loop: five identical invoice_lookup calls, blamed on billing_worker's model turn that issued them
    # (judges/decision.py), which is cited with the calls' arguments and the reply they repeated after.
    assert _failing_tasks(run, "rule.repeated_tool_call") == TOUCHED_BY["retry_loop"]
    for feedback in Feedback.objects.filter(run=run, judge="rule.repeated_tool_call", verdict="fail"):
        target = Span.objects.get(trace=feedback.trace, span_id=feedback.target_span_id)
        assert target.node == "billing_worker" and target.kind == "LLM"
        (issue,) = feedback.issues
        step, *arguments, reply = issue["evidence"]
        assert step == {"span_id": target.span_id, "quote": "invoice_lookup"}
        calls = Span.objects.filter(trace=feedback.trace, span_id__in=[e["span_id"] for e in arguments])
        assert calls.count() == len(arguments) == 5
        assert {c.tool_name for c in calls} == {"invoice_lookup"} and len({str(c.input) for c in calls}) == 1
        assert {e["quote"] for e in arguments} == {'{"invoice_id": "%s"}' % calls[0].input["invoice_id"]}
        assert reply["span_id"] == arguments[0]["span_id"] and "rate_limited" in reply["quote"]

    # misroute: refund tickets answered from order_lookup, and refund_lookup never called.
    assert _failing_tasks(run, never) == TOUCHED_BY["misroute"]
    assert _failing_tasks(run, order) == TOUCHED_BY["misroute"]
    for feedback in Feedback.objects.filter(run=run, judge=never, verdict="fail"):  # blamed on the calling turn
        target = Span.objects.get(trace=feedback.trace, span_id=feedback.target_span_id)
        assert (target.kind, target.node) == ("LLM", "orders_worker")
        cited = Span.objects.filter(trace=feedback.trace, span_id__in=[e["span_id"] for e in
                                                                        feedback.issues[0]["evidence"]])
        assert {c.tool_name for c in cited if c.kind == "TOOL"} == {"order_lookup"}
    # The decoy refund without an order number is routed correctly and passes both.
    decoy = Trace.objects.get(project=project, release="r1", task_id="refund-duplicate-charge")
    assert set(Feedback.objects.filter(run=run, trace=decoy, judge__in=[never, order]).values_list(
        "verdict", "status")) <= {("pass", "ok"), (None, "skipped")}

    # Every quote is in the text of the span it cites.
    for feedback in Feedback.objects.filter(run=run, verdict="fail").select_related("trace"):
        view = {s.span_id: s for s in trace_view_build(trace=feedback.trace).spans}
        for issue in feedback.issues:
            for evidence in issue["evidence"]:
                assert normalise(evidence["quote"]) in span_text(view[evidence["span_id"]])

    clean = _run(project, "r2")
    for judge in (coverage, never, order, "rule.repeated_tool_call", "rule.loop", "rule.tool_error"):
        assert _failing_tasks(clean, judge) == set(), judge
    # The one rate-limited invoice call that the healthy worker retries after backing off is still an error span.
    assert _failing_tasks(clean, "rule.span_error") == TOUCHED_BY["retry_loop"]
    # order-not-found's ERROR lookup is a not-found the desk handles (diagnosis/judges/recovery.py): a pass on that
    # span, in both releases, saying so.
    for each in (run, clean):
        decoy = Feedback.objects.get(run=each, trace__task_id="order-not-found", judge="rule.span_error")
        target = Span.objects.get(trace=decoy.trace, span_id=decoy.target_span_id)
        assert (decoy.verdict, target.tool_name, target.status) == ("pass", "order_lookup", "error")
        assert decoy.critique.startswith("Recovered not-found") and decoy.details["recovered_not_found"]
