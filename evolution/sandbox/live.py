"""A live release's processes: the agent a hot swap's process activator keeps running, its preflight commands and its
command probes (evolution/deploy). They run the approved candidate's code on the worker's host for as long as the
release is live, so they get the sandbox's profile, not the worker's rights:

- the sandbox user (CLEAR_EVOLUTION_SANDBOX_USER) when the worker is root, never uid 0;
- bubblewrap: nothing of the host but /usr, a few files of /etc and the interpreter; the release read-only; its
  heartbeat directories read-write; `current`, state.json, agent.pid and every other release out of sight;
- an environment of exactly the variables the target's config names plus PATH, HOME and LANG;
- no network, unless the operator's hot_swap config says `"network": "host"`: the agent then shares the host's
  network, loopback services (Redis, Postgres) included.

The agent outlives the Celery task that started it (a session of its own, no --die-with-parent). Killing bwrap would
leave the sandbox's processes running, so it is stopped from the inside out: SIGTERM to the agent's process group
(the sandbox's init leads it), then SIGKILL to that init, which takes the whole pid namespace down.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from evolution.errors import SandboxUnavailable
from evolution.sandbox.profile import SandboxIdentity, sandbox_identity, sandbox_nproc_default, tree_hand_over
from evolution.sandbox.runners import SANDBOX_TMP, bwrap_argv, identity_argv
from evolution.sandbox.supervise import _rlimits_apply, process_supervise
from evolution.sandbox.types import IsolationLevel, Limits, ProcResult

INFO_TIMEOUT_S = 10.0
# No address-space or CPU cap for a long-lived agent (runtimes reserve far more than they use, and it runs for
# days); processes, open files and file size stay capped.
LIVE_LIMITS = Limits(wall_s=0, memory_bytes=None, nofile=4096)


def live_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """Exactly the configured variables plus PATH (Clear's interpreter first, so `python` is the one bound in),
    HOME and LANG."""
    base = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": SANDBOX_TMP,
            "LANG": "C.UTF-8"}
    return {**base, **dict(env or {})}


@dataclass(frozen=True)
class LiveSpawn:
    """A started agent: bwrap's process (the activator's child) and the sandbox's init, as seen from the host."""

    process: subprocess.Popen
    sandbox_pid: int | None


@dataclass(frozen=True)
class LiveConfinement:
    level: IsolationLevel
    env: Mapping[str, str] = field(default_factory=dict)
    host_network: bool = False
    writable_dirs: tuple[Path, ...] = ()
    identity: SandboxIdentity | None = None
    limits: Limits = LIVE_LIMITS

    @property
    def environment(self) -> dict[str, str]:
        return live_environment(self.env)

    def prepare(self) -> None:
        """The heartbeat directories exist and belong to the sandbox user: the one place outside its release the
        agent may write."""
        for path in self.writable_dirs:
            path.mkdir(parents=True, exist_ok=True)
        if self.identity is not None:
            tree_hand_over(paths=list(self.writable_dirs), identity=self.identity)

    def _argv(self, *, cmd: Sequence[str], release_dir: Path, args_fd: int | None, one_shot: bool,
              info_fd: int | None = None) -> list[str]:
        if self.level == IsolationLevel.SUBPROCESS:
            # The operator lowered the minimum to subprocess (trusted code): still not root, with a clean environment.
            return identity_argv(self.identity) + list(cmd)
        # bwrap exports PWD after its --chdir; the release gets the configured variables and nothing else.
        cmd = ["/usr/bin/env", "-u", "PWD", "--", *cmd]
        return bwrap_argv(bwrap=shutil.which("bwrap") or "bwrap", cmd=cmd, chdir=release_dir,
                          rw_paths=self.writable_dirs, ro_paths=[release_dir], args_fd=args_fd,
                          identity=self.identity, host_network=self.host_network, die_with_parent=one_shot,
                          info_fd=info_fd)

    def _outer_env(self) -> dict[str, str]:
        # bwrap gets only a PATH; the agent's variables travel through --args, off every command line `ps` shows.
        return {"PATH": "/usr/bin:/bin"} if self.level != IsolationLevel.SUBPROCESS else self.environment

    def _args_file(self) -> IO[bytes] | None:
        if self.level == IsolationLevel.SUBPROCESS:
            return None
        handle = tempfile.TemporaryFile()
        args = ["--clearenv"]
        for name, value in self.environment.items():
            args += ["--setenv", name, value]
        handle.write(b"".join(arg.encode() + b"\0" for arg in args))
        handle.flush()
        handle.seek(0)
        return handle

    def run_once(self, *, cmd: Sequence[str], release_dir: Path, timeout_s: float,
                 env: Mapping[str, str] | None = None) -> ProcResult:
        """A preflight command or a command probe, to completion or its timeout; nothing it started survives."""
        confinement = replace(self, env={**self.env, **dict(env or {})}) if env else self
        confinement.prepare()
        release_dir = Path(release_dir).resolve()
        args_file = confinement._args_file()
        try:
            fds = (args_file.fileno(),) if args_file is not None else ()
            argv = confinement._argv(cmd=cmd, release_dir=release_dir, args_fd=fds[0] if fds else None,
                                     one_shot=True)
            limits = replace(self.limits, wall_s=timeout_s, cpu_s=int(timeout_s) + 1,
                             nproc=self.limits.nproc or sandbox_nproc_default())
            return process_supervise(argv=argv, cwd=release_dir, env=confinement._outer_env(), limits=limits,
                                     level=self.level, stdout_cap=200_000, should_stop=None, pass_fds=fds)
        finally:
            if args_file is not None:
                args_file.close()

    def spawn(self, *, cmd: Sequence[str], release_dir: Path, log: IO[bytes] | int) -> LiveSpawn:
        """Start the agent in a session of its own and return once the sandbox exists (bwrap has reported its
        init's pid). Raises OSError when nothing could start, SandboxUnavailable when bwrap gave up."""
        self.prepare()
        release_dir = Path(release_dir).resolve()
        args_file = self._args_file()
        info_r = info_w = -1
        try:
            fds: tuple[int, ...] = ()
            if args_file is not None:
                info_r, info_w = os.pipe()
                fds = (args_file.fileno(), info_w)
            argv = self._argv(cmd=cmd, release_dir=release_dir, args_fd=fds[0] if fds else None, one_shot=False,
                              info_fd=info_w if fds else None)
            limits = replace(self.limits, nproc=self.limits.nproc or sandbox_nproc_default())
            process = subprocess.Popen(
                argv, cwd=release_dir, env=self._outer_env(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, pass_fds=fds,
                preexec_fn=lambda: _rlimits_apply(limits),
            )
            if info_w >= 0:
                os.close(info_w)
                info_w = -1
            sandbox_pid = _info_read(info_r, process) if info_r >= 0 else None
        finally:
            for fd in (info_r, info_w):
                if fd >= 0:
                    os.close(fd)
            if args_file is not None:
                args_file.close()
        return LiveSpawn(process=process, sandbox_pid=sandbox_pid)


def _info_read(fd: int, process: subprocess.Popen) -> int:
    # bwrap writes {"child-pid": N, ...} once the namespaces exist; EOF without it means it gave up (its reason
    # is in the agent's log, where its stderr goes).
    deadline = time.monotonic() + INFO_TIMEOUT_S
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            try:
                return int(json.loads(data)["child-pid"])
            except (ValueError, KeyError, TypeError):
                continue
    if process.poll() is None:
        process.kill()
    process.wait()
    raise SandboxUnavailable(f"bubblewrap did not start the live release (exit {process.returncode}); its reason is "
                             "in the agent's log (agent.log in the releases root)")


def live_confinement_get(*, env: Mapping[str, str] | None = None, host_network: bool = False,
                         writable_dirs: Sequence[Path] = ()) -> LiveConfinement:
    """The live release's confinement on this server: bwrap when it works; a clean environment under the sandbox
    user only when the operator lowered the minimum to subprocess; refused otherwise (Docker does not keep a live
    release here)."""
    from evolution.sandbox.detect import HOW_TO_GET, sandbox_min_level, sandbox_problems

    problem = sandbox_problems()[IsolationLevel.BWRAP]
    floor = sandbox_min_level()
    if not problem and floor.rank <= IsolationLevel.BWRAP.rank:
        level = IsolationLevel.BWRAP
    elif floor == IsolationLevel.SUBPROCESS:
        level = IsolationLevel.SUBPROCESS
    elif floor == IsolationLevel.DOCKER:
        raise SandboxUnavailable(
            "a live release (hot swap, process activator) runs under bubblewrap, which is below this server's "
            "minimum docker (CLEAR_EVOLUTION_MIN_SANDBOX); use a systemd or kubernetes activator, or allow bwrap",
            extra={"level": "bwrap", "min_level": floor.value})
    else:
        raise SandboxUnavailable(f"a live release runs under bubblewrap, which does not work here: {problem}. To get "
                                 f"it, {HOW_TO_GET[IsolationLevel.BWRAP]}", extra={"level": "bwrap"})
    return LiveConfinement(level=level, env=dict(env or {}), host_network=host_network,
                           writable_dirs=tuple(Path(p) for p in writable_dirs), identity=sandbox_identity())
