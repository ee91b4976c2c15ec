"""The three sandbox runners: plain subprocess (rlimits only), bubblewrap, Docker.

Install, test and trial commands get no network at all; a run given an `egress` (host, port) reaches that one
destination through a proxy (evolution/sandbox/egress.py) and nothing else, the host's loopback included.
"""

import math
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from evolution.errors import SandboxUnavailable
from evolution.sandbox.profile import (
    PRIVATE_TMPFS,
    TMP_SIZE_BYTES,
    SandboxIdentity,
    interpreter_dirs,
    sandbox_identity,
    sandbox_nproc_default,
    server_secret_paths,
    system_binds,
    tree_hand_over,
)
from evolution.sandbox.supervise import process_supervise
from evolution.sandbox.types import IsolationLevel, Limits, ProcResult, sandbox_base_env

SANDBOX_TMP = "/tmp"


class SubprocessRunner:
    """No filesystem or network isolation: a cleared environment, rlimits and a process-group kill only."""

    level = IsolationLevel.SUBPROCESS

    def run(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path] = (), ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None, limits: Limits = Limits(), egress: tuple[str, int] | None = None,
        stdout_cap: int = 1_000_000, should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult:
        # No isolation to route through: the process shares the worker's network as it shares everything else.
        private_tmp = tempfile.mkdtemp(prefix="clear-sandbox-")
        try:
            return process_supervise(
                argv=cmd, cwd=Path(workdir), env=sandbox_base_env(home=private_tmp, tmpdir=private_tmp, env=env),
                limits=limits, level=self.level, stdout_cap=stdout_cap, should_stop=should_stop,
            )
        finally:
            shutil.rmtree(private_tmp, ignore_errors=True)


class BwrapRunner:
    """Bubblewrap with nothing of the host's root: /usr, a few files of /etc, the interpreter, fresh /proc, /dev and
    tmpfs dirs, the workdir read-write and the paths a run names; every namespace but the user one unshared (a root
    worker's run is handed to the sandbox user instead, so it is never uid 0 on the host); no network unless an
    egress proxy leads to one host and port."""

    level = IsolationLevel.BWRAP

    def __init__(self, *, bwrap: str | None = None, hidden_paths: Sequence[Path] | None = None):
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self.hidden_paths = hidden_paths

    def argv(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path], ro_paths: Sequence[Path],
        args_fd: int, identity: SandboxIdentity | None = None,
    ) -> list[str]:
        return bwrap_argv(bwrap=self.bwrap, cmd=cmd, chdir=workdir, rw_paths=[Path(workdir), *map(Path, rw_paths)],
                          ro_paths=ro_paths, args_fd=args_fd, identity=identity, hidden_paths=self.hidden_paths)

    def run(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path] = (), ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None, limits: Limits = Limits(), egress: tuple[str, int] | None = None,
        stdout_cap: int = 1_000_000, should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult:
        try:
            prepared = _contained_run(cmd=cmd, workdir=workdir, rw_paths=rw_paths, ro_paths=ro_paths, env=env,
                                      limits=limits, egress=egress)
        except SandboxUnavailable as exc:
            return _refused(exc.message, self.level)
        with prepared as run, ExitStack() as stack:
            cmd, ro_paths, inner_env, limits, identity = run.cmd, run.ro_paths, run.env, run.limits, run.identity
            env_args = ["--clearenv"]
            for name, value in inner_env.items():
                env_args += ["--setenv", name, value]
            args_file = stack.enter_context(tempfile.TemporaryFile())
            args_file.write(b"".join(arg.encode() + b"\0" for arg in env_args))
            args_file.flush()
            args_file.seek(0)
            argv = self.argv(cmd=cmd, workdir=workdir, rw_paths=rw_paths, ro_paths=ro_paths,
                             args_fd=args_file.fileno(), identity=identity)
            # bwrap itself gets no server variables either.
            return process_supervise(
                argv=argv, cwd=Path(workdir), env={"PATH": "/usr/bin:/bin"}, limits=limits, level=self.level,
                stdout_cap=stdout_cap, should_stop=should_stop, pass_fds=(args_file.fileno(),),
            )


def bwrap_argv(
    *, bwrap: str, cmd: Sequence[str], chdir: Path, rw_paths: Sequence[Path], ro_paths: Sequence[Path], args_fd: int,
    identity: SandboxIdentity | None, hidden_paths: Sequence[Path] | None = None, host_network: bool = False,
    die_with_parent: bool = True, info_fd: int | None = None,
) -> list[str]:
    """The bwrap command line of every contained run: a trial's (its workdir among rw_paths) and a live release's
    (evolution/sandbox/live.py: its release read-only, the host's network only when the operator opted in, and no
    --die-with-parent for the agent, which outlives the task that started it)."""
    # The environment goes through --args, so the values are not on a command line `ps` shows.
    argv = [bwrap, "--args", str(args_fd)]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    links, system_paths = system_binds()
    for target, link in links:
        argv += ["--symlink", target, link]
    # Mounts go shallow to deep, so the deeper path decides: a workdir inside the hidden var dir is bound back
    # on top of it, a hidden dir inside the workdir stays hidden, the venv inside a workdir stays read-only.
    # At equal depth a bind beats a hiding mount (the workdir is always reachable).
    mounts: list[tuple[Path, int, list[str]]] = [
        (Path(SANDBOX_TMP), 0, ["--perms", "1777", "--size", str(TMP_SIZE_BYTES), "--tmpfs", SANDBOX_TMP])]
    mounts += [(Path(path), 0, ["--perms", "0755", "--tmpfs", path]) for path in PRIVATE_TMPFS]
    binds: list[Path] = []
    for path in system_paths + interpreter_dirs() + [Path(p) for p in ro_paths]:
        path = path.resolve()
        binds.append(path)
        mounts.append((path, 1, ["--ro-bind", str(path), str(path)]))
    for path in map(Path, rw_paths):
        path = path.resolve()
        binds.append(path)
        mounts.append((path, 1, ["--bind", str(path), str(path)]))
    hidden = hidden_paths if hidden_paths is not None else server_secret_paths()
    for path in map(Path, hidden):
        path = path.resolve()
        # Only what lies inside something bound needs hiding: nothing else of the host is there to see.
        if any(path != bound and path.is_relative_to(bound) for bound in binds):
            mounts.append((path, 0, ["--tmpfs", str(path)] if path.is_dir()
                           else ["--ro-bind", "/dev/null", str(path)]))
    mounts += _parent_dirs(mounts, binds)
    for _, _, mount in sorted(mounts, key=lambda item: (len(item[0].parts), item[1])):
        argv += mount
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not host_network:
        argv.append("--unshare-net")
    if die_with_parent:
        argv.append("--die-with-parent")
    argv += ["--new-session", "--chdir", str(Path(chdir).resolve())]
    if os.geteuid() == 0:
        # setpriv needs these two to become the sandbox user; both are gone once it has (a uid change to
        # non-zero clears every capability), and no-new-privs keeps setuid binaries from bringing them back.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    argv.append("--")
    return argv + identity_argv(identity) + list(cmd)


def identity_argv(identity: SandboxIdentity | None) -> list[str]:
    """The prefix that makes a root-started command the sandbox user, without groups, capabilities or a way back."""
    if identity is None:
        return []
    return ["/usr/bin/setpriv", f"--reuid={identity.uid}", f"--regid={identity.gid}", "--clear-groups",
            "--inh-caps=-all", "--no-new-privs", "--"]


def _parent_dirs(mounts: list[tuple[Path, int, list[str]]], binds: list[Path]) -> list[tuple[Path, int, list[str]]]:
    # bwrap creates missing parents of a mount point with the host's modes (/root is 0700), which would lock the
    # sandbox user out of a path under them; parents outside any bind are created world-traversable first.
    targets = {path for path, _, _ in mounts}
    bound = set(binds)
    parents: set[Path] = set()
    for path in targets:
        for parent in path.parents:
            if parent == Path("/") or parent in targets:
                continue
            # Inside a bind when the bind is the parent or one of its ancestors: set lookups, not a comparison with
            # every bind (this ran about 11 ms a sandboxed run, for each trial and grader).
            if parent in bound or not bound.isdisjoint(parent.parents):
                continue
            parents.add(parent)
    return [(parent, -1, ["--perms", "0755", "--dir", str(parent)]) for parent in parents]


@dataclass
class _ContainedRun:
    cmd: list[str]
    ro_paths: list[Path]
    env: dict[str, str]
    limits: Limits
    identity: SandboxIdentity | None


def _contained_run(
    *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path], ro_paths: Sequence[Path],
    env: Mapping[str, str] | None, limits: Limits, egress: tuple[str, int] | None,
) -> AbstractContextManager[_ContainedRun]:
    """What bwrap and Docker runs share: the host user the run becomes (its writable trees handed over), the
    always-on caps, the environment, and the egress proxy (its dir bound, its relay wrapping the command) when the
    run may reach one host. Raises SandboxUnavailable at once, before anything starts."""
    identity = sandbox_identity()
    if identity is not None:
        tree_hand_over(paths=[Path(workdir), *map(Path, rw_paths)], identity=identity)
    run = _ContainedRun(cmd=list(cmd), ro_paths=list(ro_paths), limits=contained_limits(limits), identity=identity,
                        env=sandbox_base_env(home=SANDBOX_TMP, tmpdir=SANDBOX_TMP, env=env))
    return _egress_scope(run, egress)


@contextmanager
def _egress_scope(run: _ContainedRun, egress: tuple[str, int] | None) -> Iterator[_ContainedRun]:
    if egress is None:
        yield run
        return
    from evolution.sandbox.egress import EgressProxy

    with EgressProxy(host=egress[0], port=egress[1]) as proxy:
        run.ro_paths.append(proxy.dir)
        run.env.update(proxy.env())
        run.cmd = proxy.wrap(run.cmd, python=sys.executable)
        yield run


def contained_limits(limits: Limits) -> Limits:
    """A contained run always has a process and CPU cap (RLIMIT_NPROC binds the sandbox user, not the root worker
    that starts bwrap; CPU time cannot exceed the wall time the run is given anyway)."""
    return replace(limits, nproc=limits.nproc or sandbox_nproc_default(),
                   cpu_s=limits.cpu_s or int(math.ceil(limits.wall_s)) + 1)


def _refused(message: str, level: IsolationLevel) -> ProcResult:
    return ProcResult(exit_code=126, signal=None, timed_out=False, cancelled=False, stdout="",
                      stderr=f"sandbox refused to start: {message}", truncated=False, duration_s=0.0,
                      isolation_level=level)


class DockerRunner:
    """`docker run --rm` per research §5.4 with Clear's interpreter mounted read-only at the same paths.

    The image must be ABI-compatible with the host's Python (same libc); CLEAR_EVOLUTION_DOCKER_IMAGE picks it.
    """

    level = IsolationLevel.DOCKER

    def __init__(self, *, image: str, docker: str | None = None):
        self.image = image
        self.docker = docker or shutil.which("docker") or "docker"

    def argv(
        self, *, name: str, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path], ro_paths: Sequence[Path],
        env_names: Sequence[str], path_value: str, limits: Limits, identity: SandboxIdentity | None,
    ) -> list[str]:
        """`docker run` with the equivalent of the bwrap profile: a non-root user, no network, a read-only root,
        no capabilities or new privileges, and caps on processes, memory, file size, open files and CPU."""
        user = f"{identity.uid}:{identity.gid}" if identity is not None else f"{os.getuid()}:{os.getgid()}"
        argv = [self.docker, "run", "--rm", "--name", name, "--read-only", "--network", "none",
                "--tmpfs", f"{SANDBOX_TMP}:rw,exec,size={TMP_SIZE_BYTES}", "--tmpfs", "/run:rw,noexec",
                "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", user,
                "--pids-limit", str(limits.nproc or sandbox_nproc_default())]
        if limits.memory_bytes:
            argv += ["--memory", str(limits.memory_bytes)]
        if limits.nofile:
            argv += ["--ulimit", f"nofile={limits.nofile}"]
        if limits.fsize_bytes:
            argv += ["--ulimit", f"fsize={limits.fsize_bytes}"]
        if limits.cpu_s:
            argv += ["--ulimit", f"cpu={limits.cpu_s}"]
        for path in interpreter_dirs() + [Path(p) for p in ro_paths]:
            argv += ["-v", f"{path}:{path}:ro"]
        for path in [Path(workdir), *(Path(p) for p in rw_paths)]:
            argv += ["-v", f"{path}:{path}:rw"]
        # Names only: the values travel in the client's environment, not on a command line `ps` shows. PATH is
        # the exception, the client needs its own.
        argv += ["-e", f"PATH={path_value}"]
        for var in env_names:
            if var != "PATH":
                argv += ["-e", var]
        return argv + ["-w", str(workdir), self.image, *cmd]

    def run(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path] = (), ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None, limits: Limits = Limits(), egress: tuple[str, int] | None = None,
        stdout_cap: int = 1_000_000, should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult:
        try:
            prepared = _contained_run(cmd=cmd, workdir=workdir, rw_paths=rw_paths, ro_paths=ro_paths, env=env,
                                      limits=limits, egress=egress)
        except SandboxUnavailable as exc:
            return _refused(exc.message, self.level)
        name = f"clear-sandbox-{uuid.uuid4().hex[:16]}"
        with prepared as run:
            cmd, ro_paths, inner_env, limits, identity = run.cmd, run.ro_paths, run.env, run.limits, run.identity
            argv = self.argv(name=name, cmd=cmd, workdir=workdir, rw_paths=rw_paths, ro_paths=ro_paths,
                             env_names=list(inner_env), path_value=inner_env["PATH"], limits=limits,
                             identity=identity)
            client_env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
            client_env.update(inner_env)
            client_env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
            return process_supervise(
                argv=argv, cwd=Path(workdir), env=client_env, limits=limits, level=self.level,
                stdout_cap=stdout_cap, should_stop=should_stop, rlimits=False, on_kill=lambda: self._kill(name),
            )

    def _kill(self, name: str) -> None:
        # Killing the client leaves the container running; the daemon owns it.
        subprocess.run([self.docker, "kill", name], capture_output=True, timeout=30, check=False)
