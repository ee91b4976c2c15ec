"""Activators bring the release `current` points at into service: restart a process, a systemd unit, or a
Kubernetes rollout. `reload` raises ActivatorError when it cannot; health is the probes' job, not the activator's.

`stop()` takes the agent down (tests, the demo's shutdown, an operator); a promotion never calls it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from evolution.deploy.commands import (
    CommandOutcome,
    CommandRunner,
    command_argv,
    command_env,
    subprocess_command_runner,
)
from evolution.processes import process_group_kill, process_stat
from clear.errors import ClearError
from evolution.deploy.state import file_replace_atomic
from evolution.deploy.errors import ActivatorError, DeployInvalid


@runtime_checkable
class Activator(Protocol):
    def reload(self, *, release_dir: Path) -> None: ...

    def stop(self) -> None: ...

    def alive(self) -> bool: ...


class ProcessActivator:
    """Runs `command` (with `{release_dir}` filled in) from the release directory in its own process group; a reload
    kills the old group (SIGTERM, then SIGKILL after `stop_timeout_s`) and starts the new release.

    With `pid_file`, the running agent is recorded (pid + kernel start time, so a recycled pid is never mistaken for
    it) and a later activator — the next Celery task, after a worker restart — adopts, probes and replaces it.

    With `confinement` (evolution/sandbox/live.py, what every hot-swap job's plan passes) the agent runs in the
    sandbox as the sandbox user; the record then also holds the sandbox's init, through which it is stopped.
    """

    def __init__(
        self,
        *,
        command: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        pid_file: Path | None = None,
        stop_timeout_s: float = 5.0,
        confinement: Any = None,
    ):
        command_argv(command, release_dir="")  # bad commands fail at configuration time, not at the first reload
        if stop_timeout_s <= 0:
            raise DeployInvalid(f"ProcessActivator stop_timeout_s must be positive, got {stop_timeout_s!r}.")
        self.command = command
        self.env = dict(env or {})
        self.log_path = Path(log_path) if log_path else None
        self.pid_file = Path(pid_file) if pid_file else None
        self.stop_timeout_s = stop_timeout_s
        self.confinement = confinement
        self.process: subprocess.Popen[bytes] | None = None
        self.sandbox: tuple[int, int] | None = None  # the sandbox's init (pid, start) when confined
        self.release_dir: Path | None = None
        self._guard = threading.Lock()

    def _record_read(self) -> dict | None:
        if self.pid_file is None:
            return None
        try:
            data = json.loads(self.pid_file.read_text())
            return data if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None

    def _recorded(self) -> tuple[int, int] | None:
        """(pid, start time) of the agent in pid_file, if that very process still runs."""
        return _running(self._record_read(), "pid", "start")

    def _sandbox_running(self) -> tuple[int, int] | None:
        """(pid, start time) of the sandbox's init: this activator's own agent's, else the recorded one's."""
        if self.sandbox is not None:
            return _running({"pid": self.sandbox[0], "start": self.sandbox[1]}, "pid", "start")
        return _running(self._record_read(), "sandbox_pid", "sandbox_start")

    @property
    def pid(self) -> int | None:
        if self.process is not None:
            return self.process.pid
        recorded = self._recorded()
        return recorded[0] if recorded else None

    def alive(self) -> bool:
        process = self.process
        if process is not None:
            return process.poll() is None
        return self._recorded() is not None

    def reload(self, *, release_dir: Path) -> None:
        release_dir = Path(release_dir)
        if not release_dir.is_dir():
            raise ActivatorError(f"Cannot start {self.command!r}: release directory {release_dir} does not exist.")
        argv = command_argv(self.command, release_dir=str(release_dir))
        with self._guard:
            self._stop_locked()
            log: IO[bytes] | int = subprocess.DEVNULL
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                log = open(self.log_path, "ab")
            try:
                if self.confinement is not None:
                    spawned = self.confinement.spawn(cmd=argv, release_dir=release_dir, log=log)
                    self.process, sandbox_pid = spawned.process, spawned.sandbox_pid
                else:
                    self.process, sandbox_pid = subprocess.Popen(
                        argv, cwd=release_dir, env=command_env(self.env), stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT, start_new_session=True,
                    ), None
            except (OSError, ClearError) as exc:
                reason = getattr(exc, "message", None) or getattr(exc, "strerror", None) or str(exc)
                raise ActivatorError(f"Cannot start {' '.join(argv)} in {release_dir}: {reason}") from exc
            finally:
                if not isinstance(log, int):
                    log.close()
            self.release_dir = release_dir
            stat = process_stat(self.process.pid)
            sandbox_stat = process_stat(sandbox_pid) if sandbox_pid is not None else None
            self.sandbox = (sandbox_pid, sandbox_stat[1]) if sandbox_pid is not None and sandbox_stat else None
            if self.pid_file is not None and stat is not None:
                record = {"pid": self.process.pid, "start": stat[1], "release_dir": str(release_dir)}
                if self.sandbox is not None:
                    record.update(sandbox_pid=self.sandbox[0], sandbox_start=self.sandbox[1])
                file_replace_atomic(self.pid_file, json.dumps(record).encode())

    def stop(self) -> None:
        with self._guard:
            self._stop_locked()

    def _stop_locked(self) -> None:
        sandbox = self._sandbox_running()
        process, self.process, self.sandbox = self.process, None, None
        recorded = self._recorded() if process is None else None
        if process is None and recorded is None:
            if sandbox is not None:  # bwrap is gone but its sandbox is not: only its init can take it down
                process_group_kill(sandbox[0])
            return
        pgid = process.pid if process is not None else recorded[0]  # start_new_session: leader pid = group id
        # A sandboxed agent is in the group its sandbox's init leads (bwrap's --new-session), not in bwrap's:
        # SIGTERM reaches it there; the init itself takes no SIGTERM from outside its namespace.
        process_group_kill(sandbox[0] if sandbox is not None else pgid, signum=signal.SIGTERM)
        if process is not None:
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                pass
        else:  # not our child: we cannot wait() for it, only watch it go
            deadline = time.monotonic() + self.stop_timeout_s
            while self._recorded() is not None and time.monotonic() < deadline:
                time.sleep(0.02)
        # Children the agent spawned may ignore SIGTERM or outlive the leader: the group goes, not just the leader.
        # A sandbox's init taken down takes its whole pid namespace with it.
        if sandbox is not None and _running({"pid": sandbox[0], "start": sandbox[1]}, "pid", "start"):
            process_group_kill(sandbox[0], wait_s=self.stop_timeout_s)
        process_group_kill(pgid, wait_s=self.stop_timeout_s)
        if process is not None:
            process.wait()
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> ProcessActivator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _running(record: dict | None, pid_key: str, start_key: str) -> tuple[int, int] | None:
    if not record:
        return None
    try:
        pid, started = int(record[pid_key]), int(record[start_key])
    except (KeyError, TypeError, ValueError):
        return None
    stat = process_stat(pid)
    if stat is None or stat[1] != started or stat[0] in ("Z", "X"):
        return None
    return pid, started


def _require_ok(outcome: CommandOutcome, what: str) -> CommandOutcome:
    if not outcome.ok:
        raise ActivatorError(f"{what} failed ({' '.join(outcome.argv)}): {outcome.summary()}",
                             extra={"command": outcome.to_dict()})
    return outcome


class SystemdActivator:
    """`systemctl restart <unit>`, then `systemctl is-active <unit>`. The unit's WorkingDirectory (or ExecStart)
    names `<releases_root>/current`, so the restart picks up whatever the symlink points at."""

    def __init__(
        self,
        *,
        unit: str,
        runner: CommandRunner = subprocess_command_runner,
        user: bool = False,
        timeout_s: float = 90.0,
        systemctl: str = "systemctl",
    ):
        if not unit or any(ch.isspace() for ch in unit):
            raise DeployInvalid(f"SystemdActivator needs a unit name such as 'support-desk.service', got {unit!r}.")
        self.unit = unit
        self.runner = runner
        self.user = user
        self.timeout_s = timeout_s
        self.systemctl = systemctl

    def _run(self, *args: str) -> CommandOutcome:
        argv = [self.systemctl, *(["--user"] if self.user else []), *args]
        return self.runner(argv, cwd=None, timeout_s=self.timeout_s)

    def reload(self, *, release_dir: Path) -> None:
        _require_ok(self._run("restart", self.unit), f"Restarting {self.unit}")
        _require_ok(self._run("is-active", self.unit), f"{self.unit} is not active after the restart; is-active")

    def alive(self) -> bool:
        return self._run("is-active", self.unit).ok

    def stop(self) -> None:
        _require_ok(self._run("stop", self.unit), f"Stopping {self.unit}")


class KubernetesActivator:
    """`kubectl set image deployment/<name> <container>=<image>` + `kubectl rollout status`; when the rollout does
    not become ready, `kubectl rollout undo` (a progress deadline only reports, it never rolls back by itself).

    `image` is a template: `{release_id}` is the release directory's name, e.g. `registry/agent:{release_id}`.
    """

    def __init__(
        self,
        *,
        deployment: str,
        container: str,
        image: str,
        namespace: str | None = None,
        context: str | None = None,
        runner: CommandRunner = subprocess_command_runner,
        rollout_timeout_s: float = 600.0,
        kubectl: str = "kubectl",
    ):
        for field_name, value in (("deployment", deployment), ("container", container), ("image", image)):
            if not value or any(ch.isspace() for ch in value):
                raise DeployInvalid(f"KubernetesActivator {field_name} must be a non-empty name, got {value!r}.")
        if "{release_id}" not in image:
            raise DeployInvalid(
                f"KubernetesActivator image {image!r} must contain {{release_id}} so each release gets its own image "
                "(e.g. 'registry.example/agent:{release_id}')."
            )
        self.deployment = deployment
        self.container = container
        self.image = image
        self.namespace = namespace
        self.context = context
        self.runner = runner
        self.rollout_timeout_s = rollout_timeout_s
        self.kubectl = kubectl

    def _run(self, *args: str, timeout_s: float = 60.0) -> CommandOutcome:
        argv = [self.kubectl]
        if self.context:
            argv += ["--context", self.context]
        if self.namespace:
            argv += ["--namespace", self.namespace]
        return self.runner([*argv, *args], cwd=None, timeout_s=timeout_s)

    @property
    def target(self) -> str:
        return f"deployment/{self.deployment}"

    def image_for(self, release_id: str) -> str:
        return self.image.replace("{release_id}", release_id)

    def reload(self, *, release_dir: Path) -> None:
        image = self.image_for(Path(release_dir).name)
        _require_ok(self._run("set", "image", self.target, f"{self.container}={image}"), f"Setting image {image}")
        status = self._run(
            "rollout", "status", self.target, f"--timeout={int(self.rollout_timeout_s)}s",
            timeout_s=self.rollout_timeout_s + 30,
        )
        if status.ok:
            return
        undo = self._run("rollout", "undo", self.target)
        undone = (
            "rolled back with `kubectl rollout undo`" if undo.ok else f"`rollout undo` failed too: {undo.summary()}"
        )
        raise ActivatorError(
            f"The rollout of {image} to {self.target} did not become ready ({status.summary()}); {undone}.",
            extra={"status": status.to_dict(), "undo": undo.to_dict()},
        )

    def alive(self) -> bool:
        outcome = self._run("get", self.target, "-o", "jsonpath={.status.availableReplicas}")
        return outcome.ok and outcome.stdout.strip().isdigit() and int(outcome.stdout.strip()) >= 1

    def stop(self) -> None:
        _require_ok(self._run("scale", self.target, "--replicas=0"), f"Scaling {self.target} to zero")
