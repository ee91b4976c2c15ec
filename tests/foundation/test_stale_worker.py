"""Issue 44: a pytest run that is killed leaves its Celery worker consuming the test Redis database, and the next
run's tasks went to it. The worker fixture records the process it starts (pid, start time, command line) and the
next start for the same broker database kills that very process, never one that merely reuses its pid."""

import json
import subprocess
import sys

from tests.support.worker import process_identity, stale_worker_stop, worker_record

BROKER = "redis://127.0.0.1:6379/99-not-used"


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)


def test_the_recorded_worker_of_an_earlier_run_is_stopped(tmp_path):
    left_behind = _sleeper()
    try:
        worker_record(broker_url=BROKER, registry=tmp_path, pid=left_behind.pid)
        assert stale_worker_stop(broker_url=BROKER, registry=tmp_path)
        assert left_behind.wait(timeout=10) == -9
        assert not stale_worker_stop(broker_url=BROKER, registry=tmp_path)  # the record is gone with it
    finally:
        left_behind.kill()


def test_a_process_that_reused_the_pid_is_left_alone(tmp_path):
    other = _sleeper()
    try:
        worker_record(broker_url=BROKER, registry=tmp_path, pid=other.pid)
        (record,) = tmp_path.glob("worker-on-*.json")
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "start": str(int(data["start"]) - 1)}))  # started at another time
        assert not stale_worker_stop(broker_url=BROKER, registry=tmp_path)
        assert other.poll() is None and process_identity(other.pid) is not None
        worker_record(broker_url=BROKER, registry=tmp_path, pid=other.pid)
        assert not stale_worker_stop(broker_url="redis://127.0.0.1:6379/98-other", registry=tmp_path)
        assert other.poll() is None  # another broker database's record
    finally:
        other.kill()
