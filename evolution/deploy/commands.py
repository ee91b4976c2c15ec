"""Running the commands deploys need (preflight, health, systemctl, kubectl) behind one injectable callable.

Every activator and command probe takes a `CommandRunner`, so tests replace it with a fake that records the argv and
simulates failures, and a job can route preflight through the evolution sandbox (`sandbox_command_runner`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from evolution.deploy.errors import DeployInvalid
from evolution.processes import process_group_kill

OUTPUT_TAIL_CHARS = 20_000


@dataclass(frozen=True)
class CommandOutcome:
    argv: tuple[str, ...]
    exit_code: int | None  # None when killed by a signal or on timeout
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    error: str = ""  # the command could not start (missing executable, bad cwd)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.error

    def summary(self, *, limit: int = 500) -> str:
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s"
        text = (self.stderr.strip() or self.stdout.strip())[-limit:]
        return f"exit {self.exit_code}" + (f": {text}" if text else "")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        return data


class CommandRunner(Protocol):
    def __call__(
        self, argv: Sequence[str], *, cwd: Path | None, timeout_s: float, env: Mapping[str, str] | None = None
    ) -> CommandOutcome: ...


def command_argv(command: str | Sequence[str], **placeholders: str) -> tuple[str, ...]:
    """A shell-free argv from a command string (shlex-split) or list; `{name}` placeholders are filled per argument."""
    if isinstance(command, str):
        try:
            parts = shlex.split(command)
        except ValueError as exc:
            raise DeployInvalid(f"Command {command!r} cannot be split into arguments: {exc}.") from exc
    else:
        parts = [str(part) for part in command]
    if not parts:
        raise DeployInvalid("A command is empty; give the program and its arguments, e.g. 'python -m app health'.")
    try:
        return tuple(part.format(**placeholders) if placeholders else part for part in parts)
    except (KeyError, IndexError, ValueError) as exc:
        known = ", ".join("{" + name + "}" for name in placeholders) or "none"
        raise DeployInvalid(f"Command {command!r} uses an unknown placeholder {exc}; known: {known}.") from exc


def _tail(handle: IO[bytes]) -> str:
    # Output goes to files, not pipes: a helper the command backgrounded would hold a pipe open and make us wait
    # for its EOF instead of the command's exit.
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - OUTPUT_TAIL_CHARS * 4))
    return handle.read().decode("utf-8", "replace")[-OUTPUT_TAIL_CHARS:]


def command_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    # Like the sandbox runners: `python` in a command is Clear's own interpreter.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(extra or {})
    return env


def subprocess_command_runner(
    argv: Sequence[str], *, cwd: Path | None, timeout_s: float, env: Mapping[str, str] | None = None
) -> CommandOutcome:
    """Run argv in its own process group; when it exits or times out the whole group is killed, so no helper it
    started outlives it."""
    argv = tuple(argv)
    started = time.monotonic()
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        try:
            process = subprocess.Popen(
                argv, cwd=cwd, env=command_env(env), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            return CommandOutcome(argv=argv, exit_code=None,
                                  error=f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Also after a normal exit: helpers the command backgrounded must not keep running.
            process_group_kill(process.pid)
            process.wait()
        exit_code = None if timed_out or process.returncode < 0 else process.returncode
        return CommandOutcome(
            argv=argv, exit_code=exit_code, stdout=_tail(stdout), stderr=_tail(stderr), timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )


def sandbox_command_runner(sandbox: Any, *, limits: Any = None) -> CommandRunner:
    """Adapt an `evolution.sandbox.SandboxRunner` to a CommandRunner (preflight of an untrusted release)."""
    from evolution.sandbox import Limits

    base = limits or Limits()

    def run(
        argv: Sequence[str], *, cwd: Path | None, timeout_s: float, env: Mapping[str, str] | None = None
    ) -> CommandOutcome:
        if cwd is None:
            raise DeployInvalid("A sandboxed command needs a working directory (the release directory).")
        result = sandbox.run(
            cmd=list(argv), workdir=Path(cwd), env=dict(env or {}), limits=replace(base, wall_s=timeout_s),
        )
        return CommandOutcome(
            argv=tuple(argv), exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
            timed_out=result.timed_out, duration_s=result.duration_s,
            error="cancelled" if result.cancelled else "",
        )

    return run



def confined_command_runner(confinement: Any) -> CommandRunner:
    """Adapt a live release's confinement (evolution/sandbox/live.py) to a CommandRunner: preflight commands and
    command probes run in the sandbox with the release (what `cwd` resolves to, `current` followed) read-only."""

    def run(
        argv: Sequence[str], *, cwd: Path | None, timeout_s: float, env: Mapping[str, str] | None = None
    ) -> CommandOutcome:
        if cwd is None:
            raise DeployInvalid("A sandboxed command needs a working directory (the release directory).")
        release_dir = Path(cwd).resolve()
        if not release_dir.is_dir():
            return CommandOutcome(argv=tuple(argv), exit_code=None, error=f"no release directory at {cwd}")
        result = confinement.run_once(cmd=list(argv), release_dir=release_dir, timeout_s=timeout_s, env=env)
        return CommandOutcome(
            argv=tuple(argv), exit_code=result.exit_code, stdout=result.stdout[-OUTPUT_TAIL_CHARS:],
            stderr=result.stderr[-OUTPUT_TAIL_CHARS:], timed_out=result.timed_out, duration_s=result.duration_s,
        )

    return run
