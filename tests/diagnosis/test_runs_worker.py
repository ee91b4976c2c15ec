"""Diagnosis runs on a real Celery worker (Redis broker, the test Postgres): fan-out under the concurrency cap,
a SIGKILLed worker mid-run, cancellation while trace tasks run, and `diagnose --wait`."""

import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from diagnosis.conf import redispatch_seconds
from diagnosis.models import DiagnosisRun, Feedback, RunTrace
from diagnosis.services import (diagnosis_run_cancel, diagnosis_run_execute, diagnosis_run_start, diagnosis_runs_sweep,
                                rubric_create)
from tests.diagnosis.support import support_desk_ingest

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _run(run_id) -> DiagnosisRun:
    return DiagnosisRun.objects.get(pk=run_id)


def _keys(run):
    return list(Feedback.objects.filter(run=run).values_list("trace_id", "judge", "target_span_id"))


@pytest.fixture
def desk(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all")
    rubric_create(project=project, name="mediator keeps order ids", kind="coverage",
                  config={"path": ["$.order_id", "$.invoice_id"], "sources": {"kind": "TOOL"},
                          "target": {"node": "mediator", "kind": "LLM"}})
    return project


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(desk, celery_worker):
    run = diagnosis_run_start(project=desk, config={"trace_delay_seconds": 0.6, "concurrency": 2})
    max_in_flight = 0

    def some_done():
        nonlocal max_in_flight
        max_in_flight = max(max_in_flight, RunTrace.objects.filter(run=run, status__in=["queued", "running"]).count())
        return _run(run.pk).done_count >= 4

    _wait_for(some_done, 60, "the first traces")
    # Two trace tasks are in the middle of their (slow) judging now.
    _wait_for(lambda: RunTrace.objects.filter(run=run, status="running").exists(), 10, "a running trace")
    celery_worker.kill()
    killed_at = _run(run.pk)
    assert killed_at.status == "running" and killed_at.done_count < 22
    celery_worker.start()
    # acks_late + reject_on_worker_lost: the unacknowledged trace tasks come back after the visibility timeout. A
    # trace the killed worker had queued but not yet sent (killed between the commit and the publish) has no message:
    # the beat's sweep re-sends it (diagnosis_runs_sweep, after CLEAR_JUDGE_REDISPATCH_SECONDS); no beat runs here,
    # so when the run stops moving the test sweeps as the beat would, that much later.
    progress = {"done": -1, "at": time.monotonic()}

    def finished_or_swept():
        current = _run(run.pk)
        if current.is_finished:
            return current
        if current.done_count != progress["done"]:
            progress.update(done=current.done_count, at=time.monotonic())
        elif time.monotonic() - progress["at"] > 15:
            diagnosis_runs_sweep(now=timezone.now() + timedelta(seconds=redispatch_seconds() + 1))
            progress["at"] = time.monotonic()
        return None

    finished = _wait_for(finished_or_swept, 180, "the run to finish")
    assert finished.status == "succeeded", finished.failure_message
    assert (finished.done_count, finished.skipped_count, finished.error_count) == (22, 0, 0)
    assert max_in_flight <= 2
    assert RunTrace.objects.filter(run=run, attempts__gte=2).exists()  # redelivered work was done again…

    # …and wrote exactly what an uninterrupted run writes: one row per judge and target, none lost, none twice.
    reference = diagnosis_run_execute(run=diagnosis_run_start(project=desk, enqueue=False))
    keys = _keys(finished)
    assert len(keys) == len(set(keys))
    assert sorted(keys, key=str) == sorted(_keys(reference), key=str)


def test_cancelling_stops_running_trace_tasks(desk, celery_worker):
    run = diagnosis_run_start(project=desk, judges=["rules"], config={"trace_delay_seconds": 1.0, "concurrency": 2})
    _wait_for(lambda: _run(run.pk).done_count >= 2, 60, "two traces judged")
    cancelled = diagnosis_run_cancel(run=_run(run.pk))
    assert cancelled.status == "cancelled"
    # The trace tasks in flight finish judging, see the cancel and write nothing.
    _wait_for(lambda: not RunTrace.objects.filter(run=run, status__in=["pending", "queued", "running"]).exists(),
              30, "the in-flight traces to stop")
    stopped = _run(run.pk)
    written = Feedback.objects.filter(run=run).values("trace").distinct().count()
    assert written == stopped.done_count < 22
    assert stopped.done_count + stopped.skipped_count == 22
    time.sleep(2)
    assert Feedback.objects.filter(run=run).values("trace").distinct().count() == written
    assert _run(run.pk).status == "cancelled"


def test_diagnose_wait_polls_until_the_worker_is_done(desk, celery_worker):
    out, err = StringIO(), StringIO()
    call_command("diagnose", "--project", desk.name, "--judges", "rules", "--wait", "--poll-seconds", "0.2",
                 "--timeout", "120", stdout=out, stderr=err)
    run = DiagnosisRun.objects.get(project=desk)
    assert run.status == "succeeded" and run.done_count == 22
    assert "22/22 traces" in err.getvalue()
    assert "traces judged: 22 of 22" in out.getvalue()


def test_a_redelivered_copy_of_a_judged_trace_still_moves_the_run_on(desk):
    """The fresh-clone run of ae2f95c: the worker was killed after a trace's result committed and before that task
    queued the next trace. Its redelivered copy found the trace judged and returned, queueing nothing, so the run
    waited for a trace nobody was sent. The copy now does what the first one did not get to: queue the next traces
    and finish the run when nothing is left (tasks eager here: the queued traces are judged at once)."""
    from diagnosis.services.runs import run_trace_process

    run = diagnosis_run_start(project=desk, judges=["rules"], config={"concurrency": 2}, enqueue=False)
    DiagnosisRun.objects.filter(pk=run.pk).update(status="running")
    first = RunTrace.objects.filter(run=run).order_by("pk").first()
    RunTrace.objects.filter(pk=first.pk).update(status="queued")
    run_trace_process(item_id=first.pk, dispatch_next=False)  # judged; the kill came before its next was queued
    assert RunTrace.objects.filter(run=run, status="pending").count() == 21

    run_trace_process(item_id=first.pk)  # the redelivered copy
    finished = _run(run.pk)
    assert (finished.status, finished.done_count) == ("succeeded", 22)
    assert RunTrace.objects.get(pk=first.pk).attempts == 1  # not judged again
