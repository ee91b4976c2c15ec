"""What every CLI template shares: the invocation it is given and the outcome it returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evolution.sandbox.files import MAX_FILE_BYTES, WrittenFile, owner_limits, written_file_read

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
    # The uid the CLI wrote its files as (set once the sandbox level is known); None: any a run could have used.
    scratch_writers: frozenset[int] | None = None

    def scratch_file(self, name: str, *, max_bytes: int = MAX_FILE_BYTES) -> WrittenFile | None:
        """A file the CLI wrote in its scratch dir, read without following links (evolution/sandbox/files.py):
        the CLI ran as the sandbox user and chose what that name is. None when there is no such file."""
        writers = self.scratch_writers if self.scratch_writers is not None else frozenset(owner_limits())
        return written_file_read(folder=self.scratch, relative=name, owners=dict.fromkeys(writers, max_bytes))

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
