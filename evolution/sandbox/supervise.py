"""Start one process in its own session, cap its output, and kill its whole process group when it ends.

Shared by every runner: the runners only build the argv and the environment.
"""

import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from evolution.processes import process_group_wait_dead
from evolution.sandbox.types import IsolationLevel, Limits, ProcResult

POLL_S = 0.2
TERM_GRACE_S = 2.0
# After the main process exits, a descendant that escaped into its own session may still hold the pipes open.
DRAIN_GRACE_S = 1.0
READ_CHUNK = 64 * 1024


def _rlimit(kind: int, value: int | None, *, grace: int = 0) -> None:
    if value is None:
        return
    _, hard = resource.getrlimit(kind)
    soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
    new_hard = soft + grace if hard == resource.RLIM_INFINITY else min(soft + grace, hard)
    resource.setrlimit(kind, (soft, new_hard))


def _rlimits_apply(limits: Limits) -> None:
    # Runs in the forked child before exec: only async-signal-safe-ish work (plain syscalls) here.
    _rlimit(resource.RLIMIT_AS, limits.memory_bytes)
    # One extra second on the hard limit: SIGXCPU first (catchable, explains itself), SIGKILL after.
    _rlimit(resource.RLIMIT_CPU, limits.cpu_s, grace=1)
    _rlimit(resource.RLIMIT_NPROC, limits.nproc)
    _rlimit(resource.RLIMIT_NOFILE, limits.nofile)
    _rlimit(resource.RLIMIT_FSIZE, limits.fsize_bytes)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid: int) -> bool:
    # WNOWAIT leaves the zombie in place, so the process-group id cannot be reused before the group is killed.
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


class _Capture:
    def __init__(self, cap: int):
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def process_supervise(
    *,
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits,
    level: IsolationLevel,
    stdout_cap: int,
    should_stop: Callable[[], bool] | None,
    rlimits: bool = True,
    on_kill: Callable[[], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> ProcResult:
    """Run argv to completion, timeout or cancellation; no process of its group survives the call.

    `on_kill` runs when the run is stopped early, for processes the group kill cannot reach (a Docker container).
    """
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds),
            preexec_fn=(lambda: _rlimits_apply(limits)) if rlimits else None,
        )
    except OSError as exc:
        # The shell convention for "command not found / not executable", so callers handle one shape.
        return ProcResult(
            exit_code=127, signal=None, timed_out=False, cancelled=False, stdout="",
            stderr=f"cannot start {argv[0]!r}: {exc.strerror or exc}", truncated=False,
            duration_s=time.monotonic() - started, isolation_level=level,
        )
    out, err = _Capture(stdout_cap), _Capture(stdout_cap)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    selector = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream.fileno(), selectors.EVENT_READ)
    # A pidfd turns readable when the process exits, so the loop wakes then instead of at the next poll.
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
        selector.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    deadline = started + limits.wall_s
    timed_out = cancelled = exited = False
    term_sent_at: float | None = None
    exited_at = next_stop_poll = 0.0
    try:
        while True:
            for key, _ in selector.select(POLL_S):
                if key.fd == pidfd:
                    continue
                try:
                    chunk = os.read(key.fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    captures[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
            now = time.monotonic()
            if not exited and _exited(proc.pid):
                exited, exited_at = True, now
                if pidfd is not None:
                    selector.unregister(pidfd)
                _killpg(proc.pid, signal.SIGKILL)  # leftovers: daemons and sleepers it started
            if exited:
                if not selector.get_map() or now - exited_at > DRAIN_GRACE_S:
                    break
                continue
            if term_sent_at is None:
                if now >= deadline:
                    timed_out = True
                elif should_stop is not None and now >= next_stop_poll:
                    # Throttled: a chatty process wakes the loop per chunk, and should_stop may query the database.
                    next_stop_poll = now + POLL_S
                    cancelled = bool(should_stop())
                if timed_out or cancelled:
                    term_sent_at = now
                    _killpg(proc.pid, signal.SIGTERM)
                    if on_kill is not None:
                        on_kill()
            elif now - term_sent_at > TERM_GRACE_S:
                _killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.returncode is None and not _exited(proc.pid):
            _killpg(proc.pid, signal.SIGKILL)
            if on_kill is not None:
                on_kill()
        _killpg(proc.pid, signal.SIGKILL)
        # Before the leader is reaped: until then its pid, the group's id, cannot be given to another process. The
        # call promises that no process of the group is left, and a killed one goes on exiting for a moment.
        process_group_wait_dead(proc.pid)
        proc.wait()
        selector.close()
        if pidfd is not None:
            os.close(pidfd)
        proc.stdout.close()
        proc.stderr.close()
    code = proc.returncode
    return ProcResult(
        exit_code=code if code >= 0 else None, signal=-code if code < 0 else None, timed_out=timed_out,
        cancelled=cancelled, stdout=out.text(), stderr=err.text(), truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - started, isolation_level=level,
    )
