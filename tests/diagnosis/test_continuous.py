import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from diagnosis.models import ContinuousMark, DiagnosisRun, Feedback, RunTrace
from diagnosis.services import continuous_tick
from tests.diagnosis.support import support_desk_ingest
from traces.models import Span, Trace


@pytest.fixture
def quiet(settings):
    settings.CLEAR_TRACE_QUIET_SECONDS = 30
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_CONTINUOUS_JUDGES = ["rules"]


@pytest.mark.django_db
def test_a_trace_is_judged_once_after_its_quiet_period(project, quiet):
    support_desk_ingest(project=project, bugs="all", task_ids=["compare-two-invoices", "refund-status"])
    now = timezone.now()
    assert continuous_tick(now=now) == 0  # spans just arrived
    assert continuous_tick(now=now + timedelta(seconds=31)) == 2
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert run.continuous_key == (now + timedelta(seconds=31)).date().isoformat()
    assert (run.status, run.total_count, run.done_count) == ("running", 2, 2)
    judged = Feedback.objects.filter(run=run).count()
    assert judged and Feedback.objects.filter(run=run, judge="rule.repeated_tool_call", verdict="fail").count() == 1
    assert continuous_tick(now=now + timedelta(seconds=62)) == 0
    assert Feedback.objects.filter(run=run).count() == judged

    # A late trace joins the day's run; an unfinished one (root still open) waits.
    support_desk_ingest(project=project, bugs="all", task_ids=["return-policy", "two-orders-status"])
    open_trace = Trace.objects.get(project=project, task_id="two-orders-status")
    Span.objects.filter(trace=open_trace, span_id=open_trace.root_span_id).update(end_time=None)
    assert continuous_tick(now=now + timedelta(seconds=120)) == 1
    run.refresh_from_db()
    assert (run.total_count, run.done_count) == (3, 3)
    assert not RunTrace.objects.filter(trace=open_trace).exists()

    # The next day's first beat closes the finished run and opens a new one for new traces.
    tomorrow = now + timedelta(days=1)
    Span.objects.filter(trace=open_trace, span_id=open_trace.root_span_id).update(end_time=timezone.now())
    Trace.objects.filter(pk=open_trace.pk).update(last_received_at=tomorrow - timedelta(minutes=5))
    assert continuous_tick(now=tomorrow) == 1
    run.refresh_from_db()
    assert run.status == "succeeded" and run.finished_at
    assert DiagnosisRun.objects.filter(project=project, continuous=True).count() == 2


@pytest.mark.django_db
def test_continuous_mode_can_be_switched_off_and_ignores_old_traces(project, quiet, settings):
    support_desk_ingest(project=project, bugs="none", task_ids=["return-policy"])
    settings.CLEAR_CONTINUOUS_DIAGNOSIS = False
    assert continuous_tick(now=timezone.now() + timedelta(minutes=5)) == 0
    settings.CLEAR_CONTINUOUS_DIAGNOSIS = True
    assert continuous_tick(now=timezone.now() + timedelta(days=3)) == 0  # beyond the 24 h lookback
    assert continuous_tick(now=timezone.now() + timedelta(minutes=5)) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_beats_claim_each_trace_once(project, quiet):
    support_desk_ingest(project=project, bugs="all",
                        task_ids=["compare-two-invoices", "refund-status", "return-policy", "two-orders-status",
                                  "order-not-found", "password-reset"])
    later = timezone.now() + timedelta(minutes=1)
    barrier = threading.Barrier(3)
    claimed, errors = [], []

    def beat():
        try:
            barrier.wait()
            claimed.append(continuous_tick(now=later))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sum(claimed) == 6
    assert ContinuousMark.objects.count() == 6 and RunTrace.objects.count() == 6
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert (run.total_count, run.done_count) == (6, 6)
    keys = list(Feedback.objects.values_list("trace_id", "judge", "target_span_id"))
    assert len(keys) == len(set(keys))


def _resend(*, project, trace: Trace, span: Span, **changes) -> None:
    from traces.normalize import SpanRecord
    from traces.services import spans_ingest

    fields = dict(parent_span_id=span.parent_span_id or None, name=span.name, kind=span.kind,
                  start_time=span.start_time, end_time=span.end_time, status=span.status, output=span.output,
                  node=span.node or None, agent_name=span.agent_name or None, tool_name=span.tool_name or None,
                  attributes=span.attributes)
    spans_ingest(project=project, spans=[SpanRecord(trace_id=trace.trace_id, span_id=span.span_id,
                                                    **{**fields, **changes})])


@pytest.mark.django_db
def test_a_trace_changed_since_judged_is_judged_again(project, quiet):
    support_desk_ingest(project=project, bugs="all", task_ids=["compare-two-invoices", "refund-status"])
    now = timezone.now()
    assert continuous_tick(now=now + timedelta(seconds=31)) == 2
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    trace = Trace.objects.get(project=project, task_id="refund-status")
    assert trace.judged_at and not trace.changed_since_judged
    before = set(Feedback.objects.filter(run=run, trace=trace).values_list("pk", flat=True))
    assert before

    # An identical resend (an exporter's retry) changes nothing and marks nothing.
    span = Span.objects.filter(trace=trace).exclude(span_id=trace.root_span_id).order_by("start_time").first()
    _resend(project=project, trace=trace, span=span)
    trace.refresh_from_db()
    assert not trace.changed_since_judged and trace.content_changed_at is None
    assert continuous_tick(now=now + timedelta(seconds=62)) == 0

    # A resend with different content marks the trace; the next beat judges it again in the day's run.
    _resend(project=project, trace=trace, span=span, status="error", status_message="upstream timeout")
    trace.refresh_from_db()
    assert trace.changed_since_judged
    assert continuous_tick(now=now + timedelta(seconds=93)) == 1
    trace.refresh_from_db()
    assert not trace.changed_since_judged
    run.refresh_from_db()
    assert (run.total_count, run.done_count) == (2, 2)
    assert RunTrace.objects.get(run=run, trace=trace).status == "done"
    after = set(Feedback.objects.filter(run=run, trace=trace).values_list("pk", flat=True))
    assert after and not (after & before)  # judged afresh, not the old rows kept
    assert continuous_tick(now=now + timedelta(seconds=124)) == 0  # once per change

    # A late span in a judged trace counts as a change too.
    _resend(project=project, trace=trace, span=Span(span_id="00000000000000aa", parent_span_id=trace.root_span_id,
                                                    name="late", kind="TOOL", start_time=span.start_time,
                                                    end_time=span.end_time, status="ok"))
    trace.refresh_from_db()
    assert trace.changed_since_judged and trace.span_count >= 0
    assert continuous_tick(now=now + timedelta(seconds=155)) == 1
