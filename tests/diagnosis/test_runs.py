import collections

import pytest

from diagnosis.errors import DiagnosisRunFinishedError, DiagnosisRunInvalidError
from diagnosis.models import DiagnosisRun, Feedback, JudgeCacheEntry, RunTrace
from diagnosis.selectors import diagnosis_run_get, diagnosis_run_summary, feedback_list
from diagnosis.services import (
    diagnosis_run_cancel,
    diagnosis_run_execute,
    diagnosis_run_start,
    judge_cache_get,
    judge_cache_key,
    judge_cache_put,
    rubric_create,
    run_trace_process,
    trace_sampled,
)
from diagnosis.services import judging
from tests.diagnosis.support import support_desk_ingest
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db

TASKS = ["compare-two-invoices", "two-orders-status", "refund-status", "order-not-found", "return-policy"]


@pytest.fixture
def desk(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", task_ids=TASKS)
    return project


def _keys(run):
    return sorted(Feedback.objects.filter(run=run).values_list("trace__trace_id", "judge", "target_span_id"))


def test_a_run_judges_every_selected_trace_once(desk):
    run = diagnosis_run_start(project=desk, judges=["rules"], enqueue=False)
    assert run.status == "queued" and run.total_count == 5
    run = diagnosis_run_execute(run=run)
    assert (run.status, run.done_count, run.skipped_count) == ("succeeded", 5, 0)
    assert run.started_at and run.finished_at
    assert set(RunTrace.objects.filter(run=run).values_list("status", flat=True)) == {"done"}
    keys = _keys(run)
    assert len(keys) == len(set(keys))
    assert {judge for _, judge, _ in keys} == set(judging.RULE_JUDGES)
    summary = diagnosis_run_summary(project=desk, run=run)
    assert summary.traces_judged == 5 and summary.failing_by_judge["rule.repeated_tool_call"] == 1
    assert diagnosis_run_get(project=desk, run_id=run.pk) == run
    assert feedback_list(project=desk, run=run, verdict="fail").count() == sum(summary.failing_by_judge.values())


def test_a_redelivered_trace_task_writes_nothing_twice(desk, monkeypatch):
    run = diagnosis_run_start(project=desk, judges=["rules"], trace_ids=[Trace.objects.first().trace_id],
                              enqueue=False)
    item = RunTrace.objects.get(run=run)
    original = judging.trace_results
    calls = []

    def with_a_duplicate(**kwargs):
        calls.append(1)
        if len(calls) == 1:  # a second copy of the same task runs to the end while the first is still judging
            run_trace_process(item_id=item.pk, dispatch_next=False)
        return original(**kwargs)

    monkeypatch.setattr("diagnosis.services.runs.trace_results", with_a_duplicate)
    run = diagnosis_run_execute(run=run)
    assert len(calls) == 2
    assert run.done_count == 1 and run.status == "succeeded"
    keys = _keys(run)
    assert len(keys) == len(set(keys)) == Feedback.objects.filter(run=run).count()
    run_trace_process(item_id=item.pk)  # a late redelivery of a finished item
    run.refresh_from_db()
    assert run.done_count == 1 and len(_keys(run)) == len(keys)
    assert RunTrace.objects.get(pk=item.pk).attempts == 2


def test_cancel_before_start_and_midway(desk):
    queued = diagnosis_run_start(project=desk, judges=["rules"], enqueue=False)
    cancelled = diagnosis_run_cancel(run=queued)
    assert cancelled.status == "cancelled" and cancelled.skipped_count == 5 and cancelled.finished_at
    assert diagnosis_run_execute(run=cancelled).done_count == 0
    with pytest.raises(DiagnosisRunFinishedError):
        diagnosis_run_cancel(run=cancelled)

    midway = diagnosis_run_start(project=desk, judges=["rules"], enqueue=False)

    def cancel_after_two(run):
        if run.done_count == 2 and run.status == "running":
            diagnosis_run_cancel(run=run)

    run = diagnosis_run_execute(run=midway, progress=cancel_after_two)
    assert (run.status, run.done_count, run.skipped_count) == ("cancelled", 2, 3)
    assert Feedback.objects.filter(run=run).values("trace").distinct().count() == 2


def test_a_trace_task_notices_a_cancel_while_judging_and_writes_nothing(desk, monkeypatch):
    run = diagnosis_run_start(project=desk, judges=["rules"], enqueue=False)
    original = judging.trace_results

    def cancelled_meanwhile(**kwargs):
        outcome = original(**kwargs)
        DiagnosisRun.objects.filter(pk=run.pk).update(status="cancelled")
        return outcome

    monkeypatch.setattr("diagnosis.services.runs.trace_results", cancelled_meanwhile)
    run = diagnosis_run_execute(run=run)
    assert run.status == "cancelled" and run.done_count == 0
    assert not Feedback.objects.filter(run=run).exists()
    assert RunTrace.objects.filter(run=run, status="skipped").count() == 1


def test_the_budget_stops_a_run_cleanly(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all")
    run = diagnosis_run_start(project=project, judges=["rules"], budget_tokens=350, enqueue=False,
                              config={"fake_tokens_per_trace": 100})
    run = diagnosis_run_execute(run=run)
    assert run.status == "budget_exhausted"
    assert (run.done_count, run.skipped_count, run.total_count) == (4, 18, 22)
    assert run.input_tokens == 400 and run.error_count == 0
    assert Feedback.objects.filter(run=run).values("trace").distinct().count() == 4
    assert not Feedback.objects.filter(run=run, status="error").exists()
    by_cost = diagnosis_run_start(project=project, judges=["rule.loop"], budget_cost=0.25, enqueue=False,
                                  config={"fake_cost_per_trace": 0.1})
    by_cost = diagnosis_run_execute(run=by_cost)
    assert (by_cost.status, by_cost.done_count) == ("budget_exhausted", 3)


def test_selection_filters(desk):
    traces = list(Trace.objects.filter(project=desk).order_by("pk"))
    Trace.objects.filter(pk=traces[0].pk).update(tags=["vip", "eu"])
    Trace.objects.filter(pk=traces[1].pk).update(tags=["vip"])

    def selected(**kwargs):
        run = diagnosis_run_start(project=desk, judges=["rule.loop"], enqueue=False, **kwargs)
        return set(RunTrace.objects.filter(run=run).values_list("trace__task_id", flat=True))

    assert selected(tags=["vip", "eu"]) == {traces[0].task_id}
    assert selected(tags=["vip"]) == {traces[0].task_id, traces[1].task_id}
    assert selected(outcome="success") == {"order-not-found", "return-policy"}
    assert selected(node="billing_worker") == {"compare-two-invoices"}
    assert selected(trace_ids=[traces[2].trace_id.upper()]) == {traces[2].task_id}
    with pytest.raises(DiagnosisRunInvalidError, match="Release 'nope' has no traces"):
        selected(release="nope")  # a run of a release that would judge nothing is not made (issue 40)
    first = Span.objects.filter(trace__task_id="refund-status").order_by("start_time").first().start_time
    assert "refund-status" not in selected(until=first) and "refund-status" in selected(since=first)
    with pytest.raises(DiagnosisRunInvalidError, match="since must be before until"):
        selected(since=first, until=first)
    with pytest.raises(DiagnosisRunInvalidError, match="outcome must be one of"):
        selected(outcome="meh")


def test_sampling_is_deterministic_and_nested():
    ids = [f"{i:032x}" for i in range(2000)]
    half = {t for t in ids if trace_sampled(trace_id=t, rate=0.5)}
    assert 900 < len(half) < 1100
    assert half == {t for t in ids if trace_sampled(trace_id=t.upper(), rate=0.5)}
    assert {t for t in ids if trace_sampled(trace_id=t, rate=0.2)} < half
    assert all(trace_sampled(trace_id=t, rate=1.0) for t in ids[:10])


def test_judge_cache_api_roundtrip():
    key = judge_cache_key(judge="llm.trace", prompt_version="v1", model="m", content={"b": 1, "a": [1, 2]})
    assert key == judge_cache_key(judge="llm.trace", prompt_version="v1", model="m", content={"a": [1, 2], "b": 1})
    assert key != judge_cache_key(judge="llm.trace", prompt_version="v2", model="m", content={"b": 1, "a": [1, 2]})
    assert judge_cache_get(key=key) is None
    judge_cache_put(key=key, result={"score": 0.5, "issues": []})
    judge_cache_put(key=key, result={"score": 0.75, "issues": []})
    assert judge_cache_get(key=key) == {"score": 0.75, "issues": []}
    assert JudgeCacheEntry.objects.get(key=key).hits == 1


def test_a_rerun_on_unchanged_traces_reuses_cached_results(desk):
    rubric_create(project=desk, name="mediator keeps order ids", kind="coverage",
                  config={"path": "$.order_id", "sources": {"kind": "TOOL"}, "target": {"node": "mediator"}})
    first = diagnosis_run_execute(run=diagnosis_run_start(project=desk, enqueue=False))
    second = diagnosis_run_execute(run=diagnosis_run_start(project=desk, enqueue=False))
    strip = lambda run: sorted(  # noqa: E731
        Feedback.objects.filter(run=run).values_list("trace_id", "judge", "target_span_id", "verdict", "issues"),
        key=str)
    assert strip(first) == strip(second)
    assert not Feedback.objects.filter(run=first, details__cache="hit").exists()
    assert set(Feedback.objects.filter(run=second).values_list("details__cache", flat=True)) == {"hit"}
    # A changed trace is judged again.
    span = Span.objects.filter(trace__task_id="two-orders-status", kind="LLM", node="mediator").get()
    span.output = [{"role": "assistant", "parts": [{"type": "text", "content": "O-5010 and O-5011"}]}]
    span.save()
    third = diagnosis_run_execute(run=diagnosis_run_start(project=desk, enqueue=False))
    changed = Feedback.objects.filter(run=third, trace=span.trace)
    assert not changed.filter(details__cache="hit").exists()
    assert collections.Counter(Feedback.objects.filter(run=third).values_list("details__cache", flat=True))[
        "hit"] == Feedback.objects.filter(run=third).exclude(trace=span.trace).count()


def test_default_judges_and_llm_rubrics_without_a_model(desk):
    rubric_create(project=desk, name="polite", kind="llm", config={"criterion": "The answer is polite."})
    run = diagnosis_run_start(project=desk, enqueue=False)
    assert run.judges == [*judging.RULE_JUDGES, "rubrics", "contrastive"] and run.model == ""
    assert run.config["warnings"] == [
        "1 llm rubric(s) were not evaluated: they need the LLM judges and a model."]
    run = diagnosis_run_execute(run=run)
    assert not Feedback.objects.filter(run=run, judge_kind__in=["llm", "rubric"]).exists()


def test_a_trace_that_crashes_is_skipped_and_counted_and_the_run_goes_on(desk, monkeypatch):
    run = diagnosis_run_start(project=desk, judges=["rules"], enqueue=False)
    original = judging.trace_results
    crashed = []

    def crash_once(**kwargs):
        if not crashed:
            crashed.append(kwargs["trace"].trace_id)
            raise RuntimeError("bad data")
        return original(**kwargs)

    monkeypatch.setattr("diagnosis.services.runs.trace_results", crash_once)
    run = diagnosis_run_execute(run=run)
    assert (run.status, run.done_count, run.skipped_count, run.error_count) == ("succeeded", 4, 1, 1)
    assert run.errors == [{"trace_id": crashed[0], "judge": "", "error": "RuntimeError: bad data",
                           "cause": "task_failed"}]


def test_the_trace_task_gives_up_on_a_crashing_trace(desk, monkeypatch):
    from diagnosis.tasks import judge_trace as judge_trace_task

    run = diagnosis_run_start(project=desk, judges=["rules"], trace_ids=[Trace.objects.first().trace_id],
                              enqueue=False)
    DiagnosisRun.objects.filter(pk=run.pk).update(status="running")
    item = RunTrace.objects.get(run=run)
    RunTrace.objects.filter(pk=item.pk).update(status="queued")
    monkeypatch.setattr("diagnosis.services.runs.trace_view_build", lambda **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        judge_trace_task.delay(str(item.pk))
    run.refresh_from_db()
    # Its only trace crashed: no judge produced a verdict, so the run failed, naming the cause (issue 25.4).
    assert (run.status, run.skipped_count, run.error_count) == ("failed", 1, 1)
    assert "task_failed 1" in run.failure_message


def test_trace_view_build_from_stored_rows(desk):
    from diagnosis.services import trace_view_build

    trace = Trace.objects.get(project=desk, task_id="refund-status")
    view = trace_view_build(trace=trace)
    root = Span.objects.get(trace=trace, span_id=trace.root_span_id)
    assert view.trace_id == trace.trace_id and view.task_id == "refund-status" and view.outcome == "failure"
    assert view.goal == root.input and view.final_output == root.output
    assert [s.start_time for s in view.spans] == sorted(s.start_time for s in view.spans)
    assert len(view.spans) == trace.span_count and all(s.parent_span_id is not None for s in view.spans)
    assert view.synthetic_timing  # the example's root span says clear.timing=synthetic
    root.attributes = {k: v for k, v in root.attributes.items() if k != "clear.timing"}
    root.save()
    assert not trace_view_build(trace=trace).synthetic_timing
    root.resource = {**root.resource, "dataset.synthetic_timing": True}
    root.save()
    assert trace_view_build(trace=trace).synthetic_timing
