"""The three sandbox runners: plain subprocess (rlimits only), bubblewrap, Docker."""

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from evolution.sandbox.supervise import process_supervise
from evolution.sandbox.types import IsolationLevel, Limits, ProcResult, sandbox_base_env

SANDBOX_TMP = "/tmp"


def _interpreter_dirs() -> list[Path]:
    """What Clear's interpreter needs to start: the venv and the Python installation it points at."""
    dirs = [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent]
    unique: list[Path] = []
    for path in dirs:
        if path.is_dir() and path not in unique:
            unique.append(path)
    return unique


def _server_secret_paths() -> list[Path]:
    """Files and directories of the server a candidate must not read even though the root is visible read-only.

    The var dir holds the secret key and credentials, the evolution dir the mirrors, pinned graders and other jobs;
    `*_FILE` variables name secret files (Docker-secrets style) wherever they live. What a run needs from there
    (its workdir, rw_paths, ro_paths) is bound back on top.
    """
    paths: list[Path] = []
    try:
        from django.conf import settings

        paths.append(Path(settings.VAR_DIR))
        if getattr(settings, "CLEAR_EVOLUTION_DIR", None):
            paths.append(Path(settings.CLEAR_EVOLUTION_DIR))
    except Exception:  # noqa: BLE001 - without configured settings there is nothing of Django's to hide
        pass
    for name, value in os.environ.items():
        if name.endswith("_FILE") and value.startswith("/"):
            paths.append(Path(value))
    return [path for path in paths if path.exists()]


class SubprocessRunner:
    """No filesystem or network isolation: a cleared environment, rlimits and a process-group kill only."""

    level = IsolationLevel.SUBPROCESS

    def run(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path] = (), ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None, limits: Limits = Limits(), network: bool = False,
        stdout_cap: int = 1_000_000, should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult:
        private_tmp = tempfile.mkdtemp(prefix="clear-sandbox-")
        try:
            return process_supervise(
                argv=cmd, cwd=Path(workdir), env=sandbox_base_env(home=private_tmp, tmpdir=private_tmp, env=env),
                limits=limits, level=self.level, stdout_cap=stdout_cap, should_stop=should_stop,
            )
        finally:
            shutil.rmtree(private_tmp, ignore_errors=True)


class BwrapRunner:
    """Bubblewrap per research §5.4: read-only root, private /tmp, /proc and /dev, writable workdir and rw_paths."""

    level = IsolationLevel.BWRAP

    def __init__(self, *, bwrap: str | None = None, hidden_paths: Sequence[Path] | None = None):
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self.hidden_paths = hidden_paths

    def argv(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path], ro_paths: Sequence[Path],
        network: bool, args_fd: int,
    ) -> list[str]:
        # The environment goes through --args, so the values are not on a command line `ps` shows.
        argv = [self.bwrap, "--args", str(args_fd)]
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        hidden = self.hidden_paths if self.hidden_paths is not None else _server_secret_paths()
        # Mounts go shallow to deep, so the deeper path decides: a workdir inside the hidden var dir is bound back
        # on top of it, a hidden dir inside the workdir stays hidden, the venv inside a workdir stays read-only.
        # At equal depth a bind beats a hiding mount (the workdir is always reachable).
        mounts: list[tuple[Path, int, list[str]]] = [(Path(SANDBOX_TMP), 0, ["--tmpfs", SANDBOX_TMP])]
        for path in map(Path, hidden):
            path = path.resolve()
            mounts.append((path, 0, ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]))
        for path in _interpreter_dirs() + [Path(p) for p in ro_paths]:
            path = path.resolve()
            mounts.append((path, 1, ["--ro-bind", str(path), str(path)]))
        for path in [Path(workdir), *(Path(p) for p in rw_paths)]:
            path = path.resolve()
            mounts.append((path, 1, ["--bind", str(path), str(path)]))
        for _, _, mount in sorted(mounts, key=lambda item: (len(item[0].parts), item[1])):
            argv += mount
        argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not network:
            argv.append("--unshare-net")
        if os.geteuid() == 0:
            argv += ["--cap-drop", "ALL"]
        argv += ["--die-with-parent", "--new-session", "--chdir", str(Path(workdir).resolve()), "--"]
        return argv + list(cmd)

    def run(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path] = (), ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None, limits: Limits = Limits(), network: bool = False,
        stdout_cap: int = 1_000_000, should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult:
        inner_env = sandbox_base_env(home=SANDBOX_TMP, tmpdir=SANDBOX_TMP, env=env)
        env_args = ["--clearenv"]
        for name, value in inner_env.items():
            env_args += ["--setenv", name, value]
        with tempfile.TemporaryFile() as args_file:
            args_file.write(b"".join(arg.encode() + b"\0" for arg in env_args))
            args_file.flush()
            args_file.seek(0)
            argv = self.argv(cmd=cmd, workdir=workdir, rw_paths=rw_paths, ro_paths=ro_paths, network=network,
                             args_fd=args_file.fileno())
            # bwrap itself gets no server variables either.
            return process_supervise(
                argv=argv, cwd=Path(workdir), env={"PATH": "/usr/bin:/bin"}, limits=limits, level=self.level,
                stdout_cap=stdout_cap, should_stop=should_stop, pass_fds=(args_file.fileno(),),
            )


class DockerRunner:
    """`docker run --rm` per research §5.4 with Clear's interpreter mounted read-only at the same paths.

    The image must be ABI-compatible with the host's Python (same libc); CLEAR_EVOLUTION_DOCKER_IMAGE picks it.
    """

    level = IsolationLevel.DOCKER

    def __init__(self, *, image: str, docker: str | None = None):
        self.image = image
        self.docker = docker or shutil.which("docker") or "docker"

    def run(
        self, *, cmd: Sequence[str], workdir: Path, rw_paths: Sequence[Path] = (), ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None, limits: Limits = Limits(), network: bool = False,
        stdout_cap: int = 1_000_000, should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult:
        name = f"clear-sandbox-{uuid.uuid4().hex[:16]}"
        inner_env = sandbox_base_env(home=SANDBOX_TMP, tmpdir=SANDBOX_TMP, env=env)
        argv = [self.docker, "run", "--rm", "--name", name, "--read-only", "--tmpfs", f"{SANDBOX_TMP}:rw,exec",
                "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", f"{os.getuid()}:{os.getgid()}"]
        if not network:
            argv += ["--network", "none"]
        if limits.memory_bytes:
            argv += ["--memory", str(limits.memory_bytes)]
        if limits.nproc:
            argv += ["--pids-limit", str(limits.nproc)]
        if limits.nofile:
            argv += ["--ulimit", f"nofile={limits.nofile}"]
        if limits.fsize_bytes:
            argv += ["--ulimit", f"fsize={limits.fsize_bytes}"]
        if limits.cpu_s:
            argv += ["--ulimit", f"cpu={limits.cpu_s}"]
        for path in _interpreter_dirs() + [Path(p) for p in ro_paths]:
            argv += ["-v", f"{path}:{path}:ro"]
        for path in [Path(workdir), *(Path(p) for p in rw_paths)]:
            argv += ["-v", f"{path}:{path}:rw"]
        # Names only: the values travel in the client's environment, not on a command line `ps` shows. PATH is
        # the exception, the client needs its own.
        argv += ["-e", f"PATH={inner_env['PATH']}"]
        for var in inner_env:
            if var != "PATH":
                argv += ["-e", var]
        argv += ["-w", str(workdir), self.image, *cmd]
        client_env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
        client_env.update(inner_env)
        client_env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        return process_supervise(
            argv=argv, cwd=Path(workdir), env=client_env, limits=limits, level=self.level, stdout_cap=stdout_cap,
            should_stop=should_stop, rlimits=False, on_kill=lambda: self._kill(name),
        )

    def _kill(self, name: str) -> None:
        # Killing the client leaves the container running; the daemon owns it.
        subprocess.run([self.docker, "kill", name], capture_output=True, timeout=30, check=False)
