import time

import pytest

from clear.projects.models import WorkerProbe
from clear.projects.tasks import worker_probe as worker_probe_task

pytestmark = pytest.mark.worker


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_task_sent_through_the_broker_runs_and_writes_to_postgres(celery_worker):
    WorkerProbe.objects.create(token="through-broker")
    worker_probe_task.delay("through-broker")
    probe = _wait_for(
        lambda: WorkerProbe.objects.filter(token="through-broker", finished_at__isnull=False).first(),
        30, "the worker to run the probe",
    )
    assert probe.attempts == 1
    assert probe.worker_hostname.startswith("test")


def test_a_killed_worker_task_is_redelivered_and_finishes_once(celery_worker):
    WorkerProbe.objects.create(token="redelivered")
    # The hold outlasts a kill by far (the kill follows the delivery within a poll) and the final run waits it out.
    worker_probe_task.delay("redelivered", 10.0)
    _wait_for(lambda: WorkerProbe.objects.filter(token="redelivered", attempts=1).exists(), 30, "the first delivery")
    celery_worker.kill()
    assert WorkerProbe.objects.get(token="redelivered").finished_at is None
    celery_worker.start()
    # acks_late + the short visibility timeout: Redis hands the unacknowledged task to the new worker.
    _wait_for(lambda: WorkerProbe.objects.filter(token="redelivered", attempts=2).exists(), 60, "the redelivery")
    celery_worker.kill()  # the redelivered run also holds; a fresh worker proves "finish once" faster below
    celery_worker.start()
    probe = _wait_for(
        lambda: WorkerProbe.objects.filter(token="redelivered", finished_at__isnull=False).first(), 90, "the finish"
    )
    finished_at = probe.finished_at
    time.sleep(1)
    probe.refresh_from_db()
    assert probe.finished_at == finished_at
    assert probe.attempts >= 3


def test_a_kept_worker_shows_a_test_only_its_own_log(celery_worker):
    # The worker is kept between tests (pause, then resume): a test waiting for a line in its log must not find the
    # one an earlier test made it print (test_tasks.py's "'gone'" was found at once, before its own task ran).
    WorkerProbe.objects.create(token="earlier-test")
    earlier = worker_probe_task.delay("earlier-test")
    _wait_for(lambda: earlier.id in celery_worker.log(), 30, "the worker to log the earlier test's task")
    _wait_for(lambda: WorkerProbe.objects.filter(token="earlier-test", finished_at__isnull=False).exists(), 30,
              "the earlier test's task to finish")
    assert celery_worker.pause() and celery_worker.resume()  # what the fixture does between two tests
    assert earlier.id not in celery_worker.log()
    later = worker_probe_task.delay("later-test")
    _wait_for(lambda: later.id in celery_worker.log(), 30, "the worker to log this test's task")
