"""Issue 26, item 14: stopping scripts/demo.sh (Ctrl-C) stops the example agent an Evolve job's hot swap started too.
Issue 40: and it says so in one line, "Stopped.", without bash's notices of the children it ended with a signal
("scripts/demo.sh: line 61: … Quit own_session "$BIN/celery" …", which read as a crash).

The agent is started the way a hot swap starts it: the demo's own target, its hot_swap plan's process activator
reloading the release `current` points at (what `hot_swap_promote` and a rollback call), from a process of its own
as the demo's worker is. The activator puts the agent in a session of its own, so no signal to the demo reaches it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from evolution.processes import process_stat
from tests.conftest import free_port
from tests.foundation.test_demo import _demo_sessions, _embedded_env, _kill_sessions, as_from_a_terminal, demo_start

ROOT = Path(settings.BASE_DIR)

# Run with the demo's settings (its var dir, its SQLite database): the same code path as a job's hot swap.
HOT_SWAP_START = """
import json
from evolution.models import EvolutionTarget
from evolution.services.hot_swap import _plan, releases_root
target = EvolutionTarget.objects.get(name="support_desk")
root = releases_root(target=target)
activator = _plan(config=target.config, root=root).activator
activator.reload(release_dir=root / "current")
print(json.dumps({"pid": activator.pid, "pid_file": str(activator.pid_file)}))
"""


def _demo_start(var_dir: Path) -> tuple[subprocess.Popen, dict]:
    # The example traces play no part in stopping: demo.sh skips sending and diagnosing them, as on a restart, when
    # its var dir says they were (half of its start on a busy machine). The evolution target is still registered.
    var_dir.mkdir(parents=True)
    (var_dir / "demo-ingested").touch()
    env = _embedded_env(var_dir)
    process, _ = demo_start(env=env, port=free_port())
    return process, {**env, "SECRET_KEY_FILE": str(var_dir / "secret_key")}


def _running(pid: int, started: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[1] == started and stat[0] not in ("Z", "X")


# What the demo may say once signalled, before "Stopped.": that it had to kill a child, which agent it stopped.
STOP_LINES = (r"The worker or the web server did not stop; killing it\.", r"stopped the hot-swapped agent \(pid \d+\)")


def _assert_quiet_stop(output: str) -> None:
    assert not re.search(r"line \d+:", output) and "Quit" not in output and "Killed" not in output, output
    *before, last = output.splitlines() or [""]
    assert last == "Stopped.", output
    assert all(any(re.fullmatch(line_re, line) for line_re in STOP_LINES) for line in before), output


def test_ctrl_c_stops_the_hot_swapped_agent(tmp_path):
    process, env = _demo_start(tmp_path / "var")
    sessions = _demo_sessions(process.pid)
    agent = None
    try:
        assert (tmp_path / "var" / "demo-evolution-target").exists(), "the demo registered no evolution target"
        started = subprocess.run([sys.executable, "manage.py", "shell", "-c", HOT_SWAP_START], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        record = json.loads(started.stdout.strip().splitlines()[-1])
        agent = record["pid"]
        agent_start = process_stat(agent)[1]
        # The example agent runs (`support_desk serve`), in a session of its own, after its starter has exited.
        assert _running(agent, agent_start)
        assert os.getsid(agent) == agent and os.getsid(agent) not in sessions
        assert json.loads(Path(record["pid_file"]).read_text())["pid"] == agent

        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the demo's foreground group
        output, _ = process.communicate(timeout=60)
        _assert_quiet_stop(output)
        deadline = time.monotonic() + 5
        while _running(agent, agent_start) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(agent, agent_start), "the hot-swapped agent outlived the demo"
        assert not Path(record["pid_file"]).exists()
    finally:
        if process.poll() is None:
            process.kill()
        _kill_sessions(sessions | ({agent} if agent else set()))
        if not process.stdout.closed:
            process.stdout.close()


# The demo's stop path alone (scripts/_children.sh, as scripts/demo.sh uses it), on children that end the three ways
# the worker and the web server can: at SIGTERM, only at the SIGQUIT 5 s later, only at the SIGKILL 3 s after that.
CHILDREN = r"""
set -euo pipefail
ulimit -c 0  # a child ended by SIGQUIT would dump core
source "$1/scripts/_children.sh"
children_traps
own_session sleep 120 &
PIDS+=($!)
own_session bash -c 'trap "" TERM; exec sleep 120' &
PIDS+=($!)
own_session bash -c 'trap "" TERM QUIT; exec sleep 120' &
PIDS+=($!)
echo "Press Ctrl-C to stop."
wait -n "${PIDS[@]}" || true
exit 1
"""


def _children_ready(pid: int) -> set[int]:
    """The script's children's sessions once the three sleep in their own (their signals set up), else fails."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = _demo_sessions(pid) - {pid}
        if len(children) == 3 and all(_comm(child) == "sleep" for child in children):
            return children
        time.sleep(0.05)
    raise AssertionError(f"the children did not start: {_demo_sessions(pid)}")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_demo_stops_its_children_quietly(tmp_path, signum):
    script = tmp_path / "children.sh"
    script.write_text(CHILDREN)
    process = subprocess.Popen(["bash", str(script), str(ROOT)], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               preexec_fn=as_from_a_terminal)
    children: set[int] = set()
    try:
        assert process.stdout.readline() == "Press Ctrl-C to stop.\n"
        children = _children_ready(process.pid)
        signalled = time.monotonic()
        os.killpg(process.pid, signum)
        output, _ = process.communicate(timeout=30)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
        _kill_sessions(children | {process.pid})
        if not process.stdout.closed:
            process.stdout.close()
    assert output == "The worker or the web server did not stop; killing it.\nStopped.\n"
    assert process.returncode == 130
    assert took < 12, took  # SIGTERM, SIGQUIT 5 s later, SIGKILL 3 s after that
    # A zombie has stopped (in a container nobody may reap it).
    assert not [pid for pid in children if (process_stat(pid) or ("X",))[0] not in ("Z", "X")]
