"""The vocabulary every sandbox runner speaks: isolation levels, resource limits, the result of one run."""

import enum
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class IsolationLevel(enum.StrEnum):
    SUBPROCESS = "subprocess"
    BWRAP = "bwrap"
    DOCKER = "docker"

    @property
    def rank(self) -> int:
        return _RANKS[self]


_RANKS = {IsolationLevel.SUBPROCESS: 0, IsolationLevel.BWRAP: 1, IsolationLevel.DOCKER: 2}


@dataclass(frozen=True)
class Limits:
    wall_s: float = 120.0
    cpu_s: int | None = None
    memory_bytes: int | None = 2 * 1024**3  # RLIMIT_AS: address space, not resident memory
    # RLIMIT_NPROC counts every process of the uid machine-wide, and Linux never applies it to uid 0: the contained
    # runners default it to CLEAR_EVOLUTION_SANDBOX_NPROC for the sandbox user.
    nproc: int | None = None
    nofile: int | None = 1024
    fsize_bytes: int | None = 512 * 1024**2


@dataclass(frozen=True)
class ProcResult:
    exit_code: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool
    cancelled: bool
    stdout: str
    stderr: str
    truncated: bool
    duration_s: float
    isolation_level: IsolationLevel

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


class SandboxRunner(Protocol):
    level: IsolationLevel

    def run(
        self,
        *,
        cmd: Sequence[str],
        workdir: Path,
        rw_paths: Sequence[Path] = (),
        ro_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        limits: Limits = Limits(),
        egress: tuple[str, int] | None = None,
        stdout_cap: int = 1_000_000,
        should_stop: Callable[[], bool] | None = None,
    ) -> ProcResult: ...


def sandbox_base_env(*, home: str, tmpdir: str, env: Mapping[str, str] | None) -> dict[str, str]:
    """The whole environment of a sandboxed process: fixed basics, then the caller's variables (which win)."""
    base = {
        # Clear's own interpreter comes first so trial commands may start with plain `python`.
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": tmpdir,
        # Bytecode caches would show up as untracked files in the worktree and change its tree hash.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    base.update(env or {})
    return base
