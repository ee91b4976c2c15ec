"""The sandbox runners against real processes: network, filesystem, environment, limits, leftovers, levels.

The bubblewrap tests skip with a reason when bwrap is missing or broken here, except under CI=true, where they fail.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from evolution.errors import SandboxUnavailable
from evolution.sandbox import (
    BwrapRunner,
    IsolationLevel,
    Limits,
    SubprocessRunner,
    sandbox_detect,
    sandbox_problems,
    sandbox_runner_get,
)

SECRET = "s3cret-" + uuid.uuid4().hex


def _require_bwrap() -> None:
    problem = sandbox_problems()[IsolationLevel.BWRAP]
    if not problem:
        return
    message = f"bubblewrap does not work here: {problem}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: .ci/run must install bubblewrap)")
    pytest.skip(message)


@pytest.fixture
def bwrap() -> BwrapRunner:
    _require_bwrap()
    return BwrapRunner()


@pytest.fixture(params=["subprocess", "bwrap"])
def runner(request):
    if request.param == "bwrap":
        _require_bwrap()
        return BwrapRunner()
    return SubprocessRunner()


@pytest.fixture
def workdir(tmp_path) -> Path:
    path = tmp_path / "wt"
    path.mkdir()
    return path


def _python(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


@pytest.fixture
def listener():
    """A TCP server on the host's loopback; only a process sharing the host network can reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.sendall(b"hello")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


CONNECT = """
    import socket, sys
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
        print("CONNECTED", s.recv(5).decode())
    except OSError as exc:
        print("BLOCKED", exc.errno)
"""


def test_bwrap_blocks_the_network(bwrap, workdir, listener):
    blocked = bwrap.run(cmd=[*_python(CONNECT), str(listener)], workdir=workdir)
    assert blocked.exit_code == 0, blocked.stderr
    assert blocked.stdout.startswith("BLOCKED"), blocked.stdout
    assert blocked.isolation_level == IsolationLevel.BWRAP

    # The same program reaches the listener when the network is shared, so the check above can fail.
    shared = SubprocessRunner().run(cmd=[*_python(CONNECT), str(listener)], workdir=workdir)
    assert shared.stdout.strip() == "CONNECTED hello", shared.stdout + shared.stderr


WRITE_ATTEMPTS = """
    import sys
    from pathlib import Path
    for target in sys.argv[1:]:
        try:
            Path(target).write_text("x")
            print("WROTE", target)
        except OSError as exc:
            print("DENIED", target, type(exc).__name__)
"""


def test_bwrap_writes_only_the_worktree_and_rw_paths(bwrap, tmp_path, workdir):
    readonly_dir = tmp_path / "inputs"
    readonly_dir.mkdir()
    (readonly_dir / "task.json").write_text('{"task": 1}')
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    repo_file = Path(__file__).resolve().parent / f"escape-{uuid.uuid4().hex}.txt"
    targets = [workdir / "inside.txt", out_dir / "result.json", readonly_dir / "task.json",
               readonly_dir / "new.txt", repo_file, Path("/etc/clear-sandbox-escape")]

    result = bwrap.run(
        cmd=[*_python(WRITE_ATTEMPTS), *map(str, targets)], workdir=workdir, rw_paths=[out_dir],
        ro_paths=[readonly_dir],
    )

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"WROTE {workdir / 'inside.txt'}", f"WROTE {out_dir / 'result.json'}"]
    assert all(line.startswith("DENIED") for line in lines[2:]), lines
    assert len(lines) == len(targets)
    assert (workdir / "inside.txt").read_text() == "x"
    assert (readonly_dir / "task.json").read_text() == '{"task": 1}'
    assert not (readonly_dir / "new.txt").exists()
    assert not repo_file.exists()
    assert not Path("/etc/clear-sandbox-escape").exists()


def test_subprocess_runner_writes_where_it_likes(workdir, tmp_path):
    # The weakest level really has no filesystem isolation; this is why a minimum level can be configured.
    outside = tmp_path / "outside.txt"
    result = SubprocessRunner().run(cmd=[*_python(WRITE_ATTEMPTS), str(outside)], workdir=workdir)
    assert result.stdout.strip() == f"WROTE {outside}"


DUMP_ENV = """
    import json, os
    print(json.dumps(dict(os.environ)))
"""


def test_no_runner_passes_the_server_environment(runner, workdir, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgres://clear:{SECRET}@db/clear")

    result = runner.run(cmd=_python(DUMP_ENV), workdir=workdir, env={"TASK_SEED": "7"})

    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert SECRET not in result.stdout
    assert "SECRET_KEY" not in seen and "DATABASE_URL" not in seen
    assert seen["TASK_SEED"] == "7"
    assert seen["PATH"].split(":")[0] == os.path.dirname(sys.executable)
    assert {"HOME", "LANG", "TMPDIR"} <= seen.keys()
    assert result.isolation_level == runner.level


SNOOP = """
    import os, sys
    from pathlib import Path
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if sys.argv[1].encode() in (proc / "environ").read_bytes():
                found.append(proc.name)
        except OSError:
            pass
    for path in sys.argv[2:]:
        try:
            if sys.argv[1] in Path(path).read_text():
                found.append(path)
        except OSError:
            pass
    print("FOUND" if found else "CLEAN", found)
"""


def test_bwrap_hides_the_server_processes_and_secret_files(bwrap, tmp_path, settings, monkeypatch):
    var_dir = tmp_path / "var"
    (var_dir / "jobs" / "1" / "wt").mkdir(parents=True)
    (var_dir / "secret_key").write_text(SECRET)
    settings.VAR_DIR = var_dir
    settings.CLEAR_EVOLUTION_DIR = var_dir / "evolution"
    key_file = tmp_path / "keys" / "db_password"
    key_file.parent.mkdir()
    key_file.write_text(SECRET)
    monkeypatch.setenv("SECRET_KEY", SECRET)
    monkeypatch.setenv("DB_PASSWORD_FILE", str(key_file))
    workdir = var_dir / "jobs" / "1" / "wt"  # inside the hidden var dir, bound back

    cmd = [*_python(SNOOP), SECRET, str(var_dir / "secret_key"), str(key_file)]
    result = bwrap.run(cmd=cmd, workdir=workdir)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("CLEAN"), result.stdout

    # Without isolation the same snooping finds the secret, so the check above can fail.
    exposed = SubprocessRunner().run(cmd=cmd, workdir=workdir)
    assert exposed.stdout.startswith("FOUND"), exposed.stdout


def test_bwrap_keeps_a_hidden_dir_hidden_inside_the_workdir(bwrap, tmp_path, settings):
    # The deeper mount decides: a server dir under the workdir stays hidden (and unwritable) though the workdir is rw.
    workdir = tmp_path / "site"
    var_dir = workdir / "var"
    var_dir.mkdir(parents=True)
    (var_dir / "secret_key").write_text(SECRET)
    settings.VAR_DIR = var_dir
    settings.CLEAR_EVOLUTION_DIR = var_dir / "evolution"

    cmd = [*_python(SNOOP), SECRET, str(var_dir / "secret_key")]
    assert bwrap.run(cmd=cmd, workdir=workdir).stdout.startswith("CLEAN")
    plant = """
        try:
            open('var/planted', 'w').write('x')
        except OSError:
            pass
        open('ok', 'w').write('x')
    """
    result = bwrap.run(cmd=_python(plant), workdir=workdir)
    assert result.exit_code == 0, result.stderr
    assert (workdir / "ok").exists()
    assert not (var_dir / "planted").exists()  # refused, or written to a throwaway tmpfs


def test_wall_time_limit_kills_the_run(runner, workdir):
    result = runner.run(cmd=_python("import time; time.sleep(600)"), workdir=workdir, limits=Limits(wall_s=1))
    assert result.timed_out
    assert not result.cancelled
    assert result.exit_code is None
    assert result.signal in (signal.SIGTERM, signal.SIGKILL)
    assert not result.ok


def test_should_stop_cancels_the_run(runner, workdir):
    polls = []

    def should_stop() -> bool:
        polls.append(1)
        return len(polls) > 2

    result = runner.run(cmd=_python("import time; time.sleep(600)"), workdir=workdir, should_stop=should_stop)
    assert result.cancelled
    assert not result.timed_out
    assert result.exit_code is None


ALLOCATE = """
    import sys
    block = bytearray(int(sys.argv[1]) * 1024 * 1024)
    print("ALLOCATED", len(block) // (1024 * 1024))
"""


def test_memory_limit_stops_a_large_allocation(runner, workdir):
    limited = runner.run(cmd=[*_python(ALLOCATE), "400"], workdir=workdir,
                         limits=Limits(memory_bytes=200 * 1024**2))
    assert limited.exit_code not in (0, None)
    assert "MemoryError" in limited.stderr
    assert "ALLOCATED" not in limited.stdout

    # The default limit (2 GiB) lets the same allocation through: the limit above is what stopped it.
    unlimited = runner.run(cmd=[*_python(ALLOCATE), "400"], workdir=workdir)
    assert unlimited.stdout.strip() == "ALLOCATED 400", unlimited.stderr


def test_cpu_limit_kills_a_busy_loop(runner, workdir):
    result = runner.run(cmd=_python("while True: pass"), workdir=workdir, limits=Limits(cpu_s=1, wall_s=60))
    assert not result.timed_out
    assert not result.ok
    if runner.level == IsolationLevel.SUBPROCESS:
        assert result.signal in (signal.SIGXCPU, signal.SIGKILL)
    else:
        # bwrap's init reports a signalled child as 128 + signal number.
        assert result.exit_code in (128 + signal.SIGXCPU, 128 + signal.SIGKILL)


def test_output_is_capped_and_marked(runner, workdir):
    result = runner.run(cmd=_python("import sys; sys.stdout.write('x' * 200000); sys.stderr.write('e' * 10)"),
                        workdir=workdir, stdout_cap=1000)
    assert result.exit_code == 0
    assert result.stdout == "x" * 1000
    assert result.stderr == "e" * 10
    assert result.truncated

    small = runner.run(cmd=_python("print('short')"), workdir=workdir, stdout_cap=1000)
    assert small.stdout == "short\n"
    assert not small.truncated


def _alive_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


SPAWN_SLEEPER = """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
    open("sleeper.pid", "w").write(str(child.pid))
    if sys.argv[2] == "hang":
        time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["exit", "hang"])
def test_no_process_survives_the_run(runner, workdir, ending):
    marker = f"sleeper-{uuid.uuid4().hex}"
    result = runner.run(cmd=[*_python(SPAWN_SLEEPER), marker, ending], workdir=workdir, limits=Limits(wall_s=3))
    assert (workdir / "sleeper.pid").exists(), result.stderr
    assert result.timed_out == (ending == "hang")
    assert _alive_with(marker) == []
    if runner.level == IsolationLevel.SUBPROCESS:  # inside bwrap the pid is the namespace's, not ours
        pid = int((workdir / "sleeper.pid").read_text())
        assert not _pid_alive(pid)


DAEMONIZE = """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
        os._exit(0)
    time.sleep(0.5)
"""


def test_bwrap_kills_a_daemonized_grandchild(bwrap, workdir):
    # A new session escapes a process-group kill; the pid namespace dies with its init regardless.
    marker = f"daemon-{uuid.uuid4().hex}"
    result = bwrap.run(cmd=[*_python(DAEMONIZE), marker], workdir=workdir)
    assert result.exit_code == 0, result.stderr
    assert _alive_with(marker) == []


def test_a_missing_command_is_a_failed_run(runner, workdir):
    result = runner.run(cmd=["no-such-command-here"], workdir=workdir)
    assert result.exit_code not in (0, None)
    assert "no-such-command-here" in result.stderr


def test_detect_finds_bwrap_when_it_works(bwrap):
    assert sandbox_detect() == IsolationLevel.BWRAP or sandbox_detect().rank > IsolationLevel.BWRAP.rank
    assert sandbox_runner_get().level == sandbox_detect()
    assert isinstance(sandbox_runner_get(level="bwrap"), BwrapRunner)


@pytest.fixture
def without_bwrap(tmp_path, monkeypatch):
    """Re-probe with a PATH that holds no bwrap (and no docker), then restore the real detection."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    sandbox_detect(refresh=True)
    yield
    monkeypatch.undo()
    sandbox_detect(refresh=True)


def test_minimum_level_is_enforced(without_bwrap, settings):
    assert sandbox_detect() == IsolationLevel.SUBPROCESS
    assert isinstance(sandbox_runner_get(), SubprocessRunner)

    with pytest.raises(SandboxUnavailable, match="below the required minimum bwrap.*install bubblewrap"):
        sandbox_runner_get(min_level="bwrap")
    with pytest.raises(SandboxUnavailable, match="bwrap is not available here.*not on PATH"):
        sandbox_runner_get(level=IsolationLevel.BWRAP)

    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "bwrap"
    with pytest.raises(SandboxUnavailable, match="below the required minimum bwrap"):
        sandbox_runner_get()


def test_explicit_level_below_the_minimum_is_refused(settings):
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "bwrap"
    with pytest.raises(SandboxUnavailable, match="subprocess is below the required minimum bwrap"):
        sandbox_runner_get(level="subprocess")
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "subprocess"
    assert isinstance(sandbox_runner_get(level="subprocess"), SubprocessRunner)


def test_unknown_levels_say_what_is_allowed(settings):
    with pytest.raises(SandboxUnavailable, match="'chroot' is not a sandbox level; use one of subprocess, bwrap"):
        sandbox_runner_get(level="chroot")
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "jail"
    with pytest.raises(SandboxUnavailable, match="CLEAR_EVOLUTION_MIN_SANDBOX 'jail'"):
        sandbox_runner_get()


def test_levels_are_ordered():
    assert IsolationLevel.SUBPROCESS.rank < IsolationLevel.BWRAP.rank < IsolationLevel.DOCKER.rank


def test_the_group_wait_returns_once_every_killed_member_has_died():
    """Issue 44: test_no_process_survives_the_run[subprocess-exit] once failed on a 4-worker run: the sleeper, killed
    with its group, was no longer seen with its command line (it was exiting) but not yet dead, because the supervisor
    returned right after the SIGKILL. It now waits until no process of the group runs (evolution/processes.py)."""
    from evolution.processes import process_group_alive, process_group_wait_dead

    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                               "print(child.pid, flush=True); time.sleep(600)"],
                              start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        members = [leader.pid, int(leader.stdout.readline())]
        assert all(_pid_alive(pid) for pid in members)
        assert not process_group_wait_dead(leader.pid, wait_s=0.2)  # nothing was killed: they still run
        os.killpg(leader.pid, signal.SIGKILL)
        assert process_group_wait_dead(leader.pid)
        assert not process_group_alive(leader.pid) and not any(_pid_alive(pid) for pid in members)
    finally:
        try:
            os.killpg(leader.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        leader.wait()
        leader.stdout.close()
