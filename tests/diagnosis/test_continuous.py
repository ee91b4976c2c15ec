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
