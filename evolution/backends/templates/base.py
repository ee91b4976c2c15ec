"""What every CLI template shares: the invocation it is given and the outcome it returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .output import json_output_extract

# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); longer prompts are passed as a file to read.
ARGV_PROMPT_MAX_BYTES = 100_000


@dataclass(frozen=True)
class Invocation:
    executable: str  # absolute path of the CLI
    role: str
    read_only: bool
    repo: Path  # the request's workdir (the repository the role works on)
    cwd: Path  # where the CLI runs: the repo for read_write roles, the scratch dir for read_only ones
    scratch: Path  # always writable; the CLI's own output files go here
    prompt_file: Path  # system prompt + instructions + user input, as one document
    system_prompt: str  # the role's system prompt plus the output instructions
    user_prompt: str  # the user input
    extra_ro_dirs: tuple[Path, ...] = ()
    model: str = ""
    resume_session_id: str | None = None
    extra_args: tuple[str, ...] = ()
    options: Mapping[str, Any] | None = None  # the backend config, for template-specific keys

    def prompt_argument(self, text: str) -> str:
        if len(text.encode("utf-8")) <= ARGV_PROMPT_MAX_BYTES:
            return text
        return f"Your complete instructions are in the file {self.prompt_file}. Read it first and follow it."


@dataclass
class CliOutcome:
    output: dict | None = None
    session_id: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    model: str = ""
    error: str = ""


class CliTemplate:
    name: ClassVar[str]
    executable: ClassVar[str]  # the program looked up on PATH (config 'executable' overrides)
    default_api_key_env: ClassVar[str | None] = None
    # Where the CLI's model API lives: its only network destination from inside the sandbox (config model_url).
    default_model_url: ClassVar[str | None] = None
    install_hint: ClassVar[str] = ""

    def __init__(self, *, config: Mapping[str, Any]) -> None:
        self.config = config

    def argv(self, invocation: Invocation) -> list[str]:
        raise NotImplementedError

    def version_argv(self, executable: str) -> list[str] | None:
        return [executable, "--version"]

    def env(self, invocation: Invocation) -> dict[str, str]:
        """Non-secret variables the CLI needs besides its API key."""
        return {}

    def cleanup(self, invocation: Invocation) -> None:
        """Remove what the CLI leaves in the repository that is not part of the role's change."""

    def parse(self, *, stdout: str, invocation: Invocation) -> CliOutcome:
        """Default: the role's JSON is somewhere in stdout (see json_output_extract)."""
        return CliOutcome(output=json_output_extract(stdout))
