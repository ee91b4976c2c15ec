"""Run untrusted candidate code: bubblewrap when it works, Docker when an engine answers, else a bare subprocess."""

from evolution.sandbox.detect import (
    sandbox_detect,
    sandbox_levels_allowed,
    sandbox_min_level,
    sandbox_problems,
    sandbox_runner_get,
)
from evolution.sandbox.runners import BwrapRunner, DockerRunner, SubprocessRunner
from evolution.sandbox.types import IsolationLevel, Limits, ProcResult, SandboxRunner

__all__ = [
    "BwrapRunner", "DockerRunner", "IsolationLevel", "Limits", "ProcResult", "SandboxRunner", "SubprocessRunner",
    "sandbox_detect", "sandbox_levels_allowed", "sandbox_min_level", "sandbox_problems", "sandbox_runner_get",
]
