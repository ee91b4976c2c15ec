"""Issue 26, item 14: stopping scripts/demo.sh (Ctrl-C) stops the example agent an Evolve job's hot swap started too.

The agent is started the way a hot swap starts it: the demo's own target, its hot_swap plan's process activator
reloading the release `current` points at (what `hot_swap_promote` and a rollback call), from a process of its own
as the demo's worker is. The activator puts the agent in a session of its own, so no signal to the demo reaches it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from evolution.deploy.commands import process_stat
from tests.conftest import free_port
from tests.foundation.test_demo import _demo_sessions, _embedded_env, _kill_sessions, demo_start

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
    env = _embedded_env(var_dir)
    process, _ = demo_start(env=env, port=free_port())
    return process, {**env, "SECRET_KEY_FILE": str(var_dir / "secret_key")}


def _running(pid: int, started: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[1] == started and stat[0] not in ("Z", "X")


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
        process.wait(timeout=60)
        deadline = time.monotonic() + 5
        while _running(agent, agent_start) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(agent, agent_start), "the hot-swapped agent outlived the demo"
        assert not Path(record["pid_file"]).exists()
    finally:
        if process.poll() is None:
            process.kill()
        _kill_sessions(sessions | ({agent} if agent else set()))
        process.stdout.close()
