"""The heuristic's pieces: steps of nested and group-chat traces, the evidence it weighs, and judges' feedback."""

from datetime import datetime, timedelta, timezone

import pytest

from diagnosis.attribution.heuristic import FeedbackSignal, attribute_heuristic
from diagnosis.attribution.selectors import attribution_agent_counts, attribution_get, attribution_list
from diagnosis.attribution.services import attribution_compute
from diagnosis.attribution.steps import author, trace_steps
from diagnosis.judges.contract import SpanView, TraceView
from diagnosis.models import DiagnosisRun, Feedback
from traces.models import Span, Trace
from traces.services.imports import traces_import

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)


def span(span_id, *, parent="root", kind="LLM", node="desk", at=0, **fields) -> SpanView:
    return SpanView(span_id=span_id, parent_span_id=parent, name=fields.pop("name", f"{kind} {span_id}"), kind=kind,
                    node=node, start_time=T0 + timedelta(seconds=at), end_time=T0 + timedelta(seconds=at + 1),
                    **fields)


def nested_trace() -> TraceView:
    """An agent root with model calls and tool calls below it (no step indexes): the leaves are the steps."""
    return TraceView(trace_id="t1", goal="Refund invoice INV-7", outcome="failure", spans=[
        span("root", parent="", kind="AGENT", name="invoke_agent desk", output="Refunded 120 EUR."),
        span("llm1", at=1, output="I will look up the invoice.", model="gpt-4o"),
        span("tool1", at=2, kind="TOOL", tool_name="lookup", input='{"id": "INV-7"}', status="error",
             status_message="exit code 2", output="exit code 2: no such invoice"),
        span("llm2", at=3, output="Let's assume the amount is 120 EUR for demonstration.", model="gpt-4o"),
        span("llm3", at=4, output="Refunded **120 EUR**.", model="gpt-4o"),
    ])


def group_chat() -> TraceView:
    def message(i, name, text, kind="AGENT", **extra):
        return span(f"s{i}", at=i + 1, kind=kind, node=name, name=f"invoke_agent {name}", output=text,
                    attributes={"agent.step_index": i}, **extra)

    return TraceView(trace_id="t2", goal="How many moons does Mars have?", outcome="failure", spans=[
        span("root", parent="", kind="CHAIN", name="invoke_workflow task", input="How many moons does Mars have?"),
        message(0, "Planner", "Plan: look it up in the almanac, then verify."),
        message(1, "Astronomer", "```python\nprint(moons('Mars'))\n```"),
        message(2, "Computer_terminal", "exitcode: 0 (execution succeeded)\nCode output: 14", kind="TOOL",
                tool_name="Computer_terminal"),
        message(3, "Verifier", "Verified: Mars has **14** moons.\nTERMINATE"),
        message(4, "Verifier", "TERMINATE"),
    ])


def test_steps_of_a_nested_trace_are_its_leaves_and_tool_results_belong_to_the_caller():
    steps = trace_steps(nested_trace())
    assert [(s.span_id, s.index, s.agent) for s in steps] == [
        ("llm1", 0, "desk"), ("tool1", 1, "lookup"), ("llm2", 2, "desk"), ("llm3", 3, "desk")]
    assert author(steps, 1).span_id == "llm1" and author(steps, 2).span_id == "llm2"


def test_invented_data_outweighs_an_earlier_tool_error():
    decision = attribute_heuristic(steps=trace_steps(nested_trace()), goal="Refund invoice INV-7",
                                   signals=[FeedbackSignal(judge="rule.exit_code", span_id="tool1", verdict="fail")])
    assert decision.step.span_id == "llm2"
    assert "invented data" in decision.reason and "final answer" in decision.reason
    assert 0 < decision.confidence <= 1
    by_span = {c["span_id"]: c for c in decision.candidates}
    assert any("the code it issued failed" in r for r in by_span["llm1"]["reasons"])


def test_a_wrong_value_is_traced_to_the_turn_whose_code_printed_it():
    steps = trace_steps(group_chat())
    assert [s.index for s in steps] == [0, 1, 2, 3, 4]
    decision = attribute_heuristic(steps=steps, goal="How many moons does Mars have?")
    assert (decision.step.agent, decision.step.index) == ("Astronomer", 1)
    assert "'14' first appears here" in decision.reason


def test_the_trace_judges_root_cause_wins():
    steps = trace_steps(group_chat())
    decision = attribute_heuristic(steps=steps, goal="", signals=[
        FeedbackSignal(judge="llm.trace", span_id=None, verdict="fail", root_cause_span_id="s3")])
    assert (decision.step.agent, decision.step.index) == ("Verifier", 3)
    assert "llm.trace named it the root cause" in decision.reason


def test_no_steps_is_no_decision():
    decision = attribute_heuristic(steps=[], goal="x")
    assert decision.step is None and decision.confidence == 0


@pytest.mark.django_db
def test_stored_feedback_is_used_instead_of_running_the_rules(project, shared_dir):
    traces_import(project=project, path=shared_dir / "datasets" / "whowhen-algorithm-generated" /
                  "Algorithm-Generated-5.json", outcome="failure")
    trace = Trace.objects.get(project=project)
    ruled = attribution_compute(project=project, trace=trace)
    assert ruled.details["signals_from"] == "rules"

    target = Span.objects.get(trace=trace, attributes__contains={"agent.step_index": 6})
    run = DiagnosisRun.objects.create(project=project, status="succeeded")
    Feedback.objects.create(run=run, project=project, trace=trace, judge="llm.trace", judge_kind="llm",
                            verdict="fail", score=0.1, details={"root_cause": {"node": target.node,
                                                                               "span_id": target.span_id,
                                                                               "reason": "accepted a wrong count"}})
    judged = attribution_compute(project=project, trace=trace)
    assert judged.pk == ruled.pk  # recomputed in place: one row per (trace, method)
    assert (judged.step_index, judged.agent, judged.span_id) == (6, target.node, target.span_id)
    assert judged.details["signals_from"] == "feedback"

    assert attribution_get(project=project, trace=trace).pk == judged.pk
    assert list(attribution_list(project=project, agent=target.node.lower())) == [judged]
    assert attribution_agent_counts(project=project) == [{"agent": target.node, "count": 1}]


@pytest.mark.django_db
def test_insights_citing_the_decisive_span(project, shared_dir):
    from diagnosis.attribution.selectors import attribution_insights
    from diagnosis.models import Insight, InsightEvidence

    traces_import(project=project, path=shared_dir / "datasets" / "whowhen-algorithm-generated" /
                  "Algorithm-Generated-5.json", outcome="failure")
    trace = Trace.objects.get(project=project)
    # the heuristic always names a span (a learned answer under its threshold names none)
    attribution = attribution_compute(project=project, trace=trace, method="heuristic")
    run = DiagnosisRun.objects.create(project=project, status="succeeded")
    feedback = Feedback.objects.create(run=run, project=project, trace=trace, judge="llm.step", judge_kind="llm",
                                       target_span_id=attribution.span_id, verdict="fail")
    citing = Insight.objects.create(project=project, level="node", node=attribution.agent, title="Invents figures")
    other = Insight.objects.create(project=project, level="node", node="x", title="Elsewhere")
    for insight, span_id in ((citing, attribution.span_id), (citing, attribution.span_id), (other, "ffffffffffffffff")):
        InsightEvidence.objects.create(insight=insight, run=run, trace=trace, span_id=span_id, feedback=feedback,
                                       statement_text="s")
    assert list(attribution_insights(project=project, attribution=attribution)) == [citing]
