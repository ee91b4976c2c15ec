"""The coding-agent backend interface (research §7.6): one role, one request, one result; the orchestrator owns git."""

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


class Role(enum.StrEnum):
    LOCATOR = "locator"
    PLANNER = "planner"
    PLAN_REVIEWER = "plan_reviewer"
    IMPLEMENTER = "implementer"
    CODE_REVIEWER = "code_reviewer"


class Access(enum.StrEnum):
    READ_ONLY = "read_only"
    READ_WRITE = "read_write"


@dataclass(frozen=True)
class RoleRequest:
    role: Role
    iteration: int
    round: int
    system_prompt: str
    user_input: str
    workdir: Path
    access: Access
    output_schema: dict  # JSON schema the output must satisfy
    timeout_s: float
    log_dir: Path  # the backend writes its transcript here
    extra_ro_dirs: tuple[Path, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    resume_session_id: str | None = None


@dataclass(frozen=True)
class RoleResult:
    exit_code: int
    timed_out: bool
    output: dict | None  # parsed JSON (None if none/malformed; validation is the orchestrator's job)
    raw_output: str
    transcript_path: Path | None
    session_id: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    model: str = ""
    error: str = ""


@dataclass(frozen=True)
class Preflight:
    ok: bool
    version: str = ""
    error: str = ""


class CodingBackend(abc.ABC):
    name: ClassVar[str]

    def __init__(self, *, config: Mapping[str, Any]):
        self.config = dict(config)

    @abc.abstractmethod
    def preflight(self) -> Preflight:
        """Cheap readiness check (binary present, model configured); never raises."""

    @abc.abstractmethod
    def run_role(self, request: RoleRequest) -> RoleResult:
        """Play one role; raises evolution.errors.BackendCrashed when the backend itself crashed."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop a run_role in progress (from another thread); it returns soon after."""
