"""Issue 44: stopping a demo never signals a process it did not start. A child's pid is free again once the child has
ended and been reaped, and here the kernel soon hands it out again (pid_max 32768, wrapped within minutes by a test
run), so a pid kept in scripts/_children.sh's PIDS or in a test's list of demo sessions may name an unrelated process
by the time the demo is stopped: another test's worker, web server or demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.foundation.test_demo import _LEADERS, _demo_sessions, _kill_sessions

ROOT = Path(__file__).resolve().parents[2]

# The stop path of scripts/demo.sh: its own child, plus a pid it recorded that now names a process it did not start
# (here: one the test started, standing for whichever process the kernel gave the recycled pid to).
STOP = """
set -euo pipefail
source "$1/scripts/_children.sh"
own_session sleep 120 &
PIDS+=($!)
PIDS+=("$2")
children_traps
echo "started $!"
read -r _
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _stranger() -> subprocess.Popen:
    """A process in a session of its own, as the demo's children are: the kind a group kill reaches."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)



def _reap(*processes: subprocess.Popen) -> None:
    """Kill what a test started and is still running, with its session."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

def test_the_demo_stop_signals_only_its_own_children():
    stranger = _stranger()
    script = subprocess.Popen(["bash", "-c", STOP, "stop", str(ROOT), str(stranger.pid)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(script.stdout.readline().split()[1])
        assert _alive(child)
        script.stdin.close()  # the script exits: its EXIT trap stops PIDS
        script.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the demo's own child outlived the stop"
        assert stranger.poll() is None, "the stop signalled a process the demo did not start"
    finally:
        _reap(stranger, script)


def test_a_demo_session_whose_pid_names_another_process_now_is_not_killed():
    leader, stranger = _stranger(), _stranger()
    try:
        assert _demo_sessions(leader.pid) == {leader.pid}  # recorded as the demo fixture records it
        # The stranger holds a pid the fixture recorded for a process that has ended since.
        _LEADERS[stranger.pid] = ("0", "bash scripts/demo.sh --no-install --port 8000")
        _kill_sessions({leader.pid, stranger.pid})
        assert leader.wait(timeout=10) == -signal.SIGKILL  # still the process recorded: killed with its session
        time.sleep(0.2)
        assert stranger.poll() is None, "a session id whose pid was given to another process was killed"
    finally:
        _reap(leader, stranger)
