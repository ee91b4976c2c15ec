"""A hostile candidate inside the real bubblewrap sandbox (issue 22): what it must not reach, seen from outside too.

Each attempt here worked under the old profile (the host root bound read-only, a root worker's run still uid 0 on
the host): a TCP connect to the host's loopback with the network shared, the Postgres socket, /etc/shadow, another
process's environ, files outside the worktree, a detached grandchild, unbounded processes.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from evolution.sandbox import BwrapRunner, DockerRunner, IsolationLevel, Limits, SubprocessRunner, sandbox_problems
from evolution.sandbox.profile import SandboxIdentity, sandbox_identity

SECRET = "s3cret-" + uuid.uuid4().hex
DB_PASSWORD = "pw-" + uuid.uuid4().hex


@pytest.fixture
def bwrap() -> BwrapRunner:
    problem = sandbox_problems()[IsolationLevel.BWRAP]
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bubblewrap does not work here: {problem} (CI=true: .ci/run must install it)")
        pytest.skip(f"bubblewrap does not work here: {problem}")
    return BwrapRunner()


@pytest.fixture
def workdir(tmp_path) -> Path:
    path = tmp_path / "wt"
    path.mkdir()
    return path


def _python(code: str, *args: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code), *args]


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


ATTEMPTS = """
    import json, os, socket, sys
    port, web_pid, outside = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    result = {}
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        result["tcp"] = "connected"
    except OSError as exc:
        result["tcp"] = f"refused: {exc}"
    found = False
    for path in ("/var/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432", "/tmp/.s.PGSQL.5432"):
        try:
            unix = socket.socket(socket.AF_UNIX)
            unix.settimeout(3)
            unix.connect(path)
            result["postgres"] = "connected " + path
            found = True
            break
        except OSError as exc:
            result["postgres"] = f"refused: {exc}"
    for name, path in (("shadow", "/etc/shadow"), ("environ", f"/proc/{web_pid}/environ")):
        try:
            result[name] = "read " + open(path, "rb").read()[:20].hex()
        except OSError as exc:
            result[name] = f"refused: {exc}"
    written = []
    for path in outside:
        try:
            with open(path, "w") as handle:
                handle.write("escaped")
            written.append(path)
        except OSError:
            pass
    result["written"] = written
    result["uid"] = os.getuid()
    print(json.dumps(result))
"""


def _postgres_socket() -> Path | None:
    for path in (Path("/var/run/postgresql/.s.PGSQL.5432"), Path("/run/postgresql/.s.PGSQL.5432")):
        if path.exists():
            return path
    return None


def test_a_hostile_command_reaches_nothing_of_the_host(bwrap, workdir, listener, tmp_path):
    port, accepted = listener
    # A process of the server holding its secrets, as the web process does.
    web = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                           env={**os.environ, "SECRET_KEY": SECRET})
    outside = [tmp_path / "outside.txt", Path(__file__).resolve().parent / f"escape-{uuid.uuid4().hex}",
               Path("/root") / f"escape-{uuid.uuid4().hex}", Path("/var/tmp") / f"escape-{uuid.uuid4().hex}",
               Path("/etc") / f"escape-{uuid.uuid4().hex}"]
    try:
        cmd = _python(ATTEMPTS, str(port), str(web.pid), *map(str, outside))
        result = bwrap.run(cmd=cmd, workdir=workdir)
        escaped = [path for path in outside if path.exists()]
        # Without the sandbox the same program gets through, so the checks below can fail.
        exposed = SubprocessRunner().run(cmd=cmd, workdir=workdir)
    finally:
        web.kill()
        web.wait()
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["tcp"].startswith("refused"), seen
    assert seen["postgres"].startswith("refused"), seen
    assert seen["shadow"].startswith("refused"), seen
    assert seen["environ"].startswith("refused"), seen
    assert seen["written"] == [], seen
    assert escaped == []
    assert seen["uid"] != 0 or os.geteuid() != 0

    unconfined = json.loads(exposed.stdout)
    assert unconfined["tcp"] == "connected"
    assert unconfined["environ"].startswith("read")
    if _postgres_socket():
        assert unconfined["postgres"].startswith("connected")
    for path in outside:
        path.unlink(missing_ok=True)


HOLD = """
    import sys, time
    open("started", "w").write("1")
    time.sleep(30)
"""


def _pids_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def _host_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def test_the_sandboxed_process_is_not_root_on_the_host(bwrap, workdir):
    marker = f"hold-{uuid.uuid4().hex}"
    results = []
    thread = threading.Thread(target=lambda: results.append(
        bwrap.run(cmd=_python(HOLD, marker), workdir=workdir, limits=Limits(wall_s=20))))
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not (workdir / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [pid for pid in _pids_with(marker) if Path(f"/proc/{pid}/comm").read_text().strip().startswith("python")]
        assert pids, results
        # Read from outside, through the host's /proc: the uid the kernel checks the host's files against.
        uids = {_host_uid(pid) for pid in pids}
        assert 0 not in uids
        identity = sandbox_identity()
        if identity is not None:
            assert uids == {identity.uid}
            assert workdir.stat().st_uid == identity.uid  # the worktree is the sandbox user's
    finally:
        for pid in _pids_with(marker):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        thread.join()


DETACH = """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(2)
            open(sys.argv[1], "w").write("late")
            time.sleep(60)
        os._exit(0)
    time.sleep(0.3)
"""


def test_a_detached_grandchild_dies_with_the_run(bwrap, workdir):
    marker = f"late-{uuid.uuid4().hex}"
    late = workdir / marker
    result = bwrap.run(cmd=_python(DETACH, str(late)), workdir=workdir)
    assert result.exit_code == 0, result.stderr
    time.sleep(3)
    assert not late.exists()
    assert _pids_with(marker) == []


FORK_BOMB = """
    import subprocess, sys
    children, refused = [], None
    for _ in range(int(sys.argv[1])):
        try:
            children.append(subprocess.Popen(["sleep", "20"]))
        except OSError as exc:
            refused = str(exc)
            break
    print(len(children), refused)
    for child in children:
        child.kill()
"""


def test_more_processes_than_the_limit_are_refused(bwrap, workdir):
    if sandbox_identity() is None:
        pytest.skip("RLIMIT_NPROC binds a sandbox user of its own; this worker is not root, so it would count the "
                    "worker's own processes")
    result = bwrap.run(cmd=_python(FORK_BOMB, "150"), workdir=workdir, limits=Limits(nproc=40, wall_s=60))
    started, refused = result.stdout.split(" ", 1)
    assert int(started) < 40 and "Resource temporarily unavailable" in refused, result.stdout + result.stderr


def test_the_sandbox_sees_no_secret_in_its_environment_or_any_file(bwrap, workdir, tmp_path, settings, monkeypatch):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    (var_dir / "secret_key").write_text(SECRET)
    settings.VAR_DIR = var_dir
    password_file = tmp_path / "run-secrets" / "db_password"
    password_file.parent.mkdir()
    password_file.write_text(DB_PASSWORD)
    monkeypatch.setenv("SECRET_KEY", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgres://clear:{DB_PASSWORD}@127.0.0.1/clear")
    monkeypatch.setenv("DATABASE_PASSWORD_FILE", str(password_file))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + SECRET)
    scan = ["sh", "-c", 'env; grep -rIlsF -e "$1" -e "$2" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev; '
            'grep -alsF -e "$1" -e "$2" /proc/*/environ; echo SCANNED', "scan", SECRET, DB_PASSWORD]

    result = bwrap.run(cmd=scan, workdir=workdir, limits=Limits(wall_s=300))

    assert result.stdout.rstrip().endswith("SCANNED"), result.stderr[-2000:]
    assert SECRET not in result.stdout and DB_PASSWORD not in result.stdout
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("/")], lines  # no file holding either value
    # The scan can find them: the same command without the sandbox does.
    exposed = SubprocessRunner().run(cmd=["sh", "-c", f'grep -rlsF -e "$1" {tmp_path}', "scan", SECRET],
                                     workdir=workdir)
    assert str(var_dir / "secret_key") in exposed.stdout


def test_the_docker_runner_asks_for_the_same_containment(tmp_path):
    # There is no Docker engine on this machine: the arguments are what can be checked here.
    identity = SandboxIdentity(uid=999, gid=995, name="clear-sandbox")
    argv = DockerRunner(image="debian:12-slim", docker="docker").argv(
        name="c1", cmd=["python", "-c", "1"], workdir=tmp_path, rw_paths=[], ro_paths=[], env_names=["PATH", "X"],
        path_value="/usr/bin", limits=Limits(nproc=64, cpu_s=10), identity=identity)
    joined = " ".join(argv)
    assert argv[argv.index("--user") + 1] == "999:995"
    assert argv[argv.index("--network") + 1] == "none"
    assert "--read-only" in argv and argv[argv.index("--pids-limit") + 1] == "64"
    assert argv[argv.index("--cap-drop") + 1] == "ALL" and "no-new-privileges" in argv
    assert "cpu=10" in joined and "fsize=" in joined and "nofile=" in joined and "--memory" in argv
    assert f"{tmp_path}:{tmp_path}:rw" in argv
    assert not any(arg.startswith("/:") or arg == "/:/" for arg in argv)  # the host root is never mounted
    assert "X" in argv and not any("=" in arg and arg.startswith("X=") for arg in argv)  # values travel in env

    as_worker = DockerRunner(image="debian:12-slim", docker="docker").argv(
        name="c2", cmd=["true"], workdir=tmp_path, rw_paths=[], ro_paths=[], env_names=[], path_value="/usr/bin",
        limits=Limits(), identity=None)
    assert as_worker[as_worker.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert "--pids-limit" in as_worker


def test_a_root_worker_without_the_sandbox_user_refuses_to_run(bwrap, workdir, settings):
    if os.geteuid() != 0:
        pytest.skip("only a root worker hands runs to a sandbox user")
    settings.CLEAR_EVOLUTION_SANDBOX_USER = f"no-such-user-{uuid.uuid4().hex[:8]}"
    result = bwrap.run(cmd=_python("open('ran', 'w').write('1')"), workdir=workdir)
    assert result.exit_code == 126 and "does not exist" in result.stderr
    assert not (workdir / "ran").exists()
