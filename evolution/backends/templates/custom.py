"""Any other CLI: config `command` (a string split like a shell would, or a list), with placeholders.

Placeholders, each replaced inside its own argument: {prompt_file}, {repo}, {cwd}, {scratch}, {output_file},
{role}, {model}, {read_only} ("1"/"0"). The role output is read from {output_file} if the command wrote it, else
found in stdout. `version_args` (a list, e.g. ["--version"]) lets preflight run the program.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from evolution.errors import BackendError

from .base import CliOutcome, CliTemplate, Invocation
from .output import json_output_extract

OUTPUT_FILE = "output.json"
PLACEHOLDERS = ("prompt_file", "repo", "cwd", "scratch", "output_file", "role", "model", "read_only")


def custom_command_parse(command: Any) -> list[str]:
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as error:
            raise BackendError(f"external backend: config 'command' cannot be split: {error}") from error
    elif isinstance(command, list) and all(isinstance(part, str) for part in command):
        argv = list(command)
    else:
        raise BackendError("external backend: the custom template needs config 'command', a string or a list of "
                           "strings, e.g. \"my-agent --prompt {prompt_file} --out {output_file}\"")
    if not argv:
        raise BackendError("external backend: config 'command' is empty")
    for part in argv:
        try:
            part.format_map({name: "" for name in PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as error:
            raise BackendError(f"external backend: config 'command' argument {part!r} has an unknown or malformed "
                               f"placeholder ({error}); known: {', '.join(PLACEHOLDERS)}") from error
    return argv


class CustomTemplate(CliTemplate):
    name = "custom"
    executable = ""
    install_hint = "set config 'command' to a program on PATH"

    def __init__(self, *, config: Mapping[str, Any]) -> None:
        super().__init__(config=config)
        self.command = custom_command_parse(config.get("command"))
        self.program = self.command[0]
        version_args = config.get("version_args")
        if version_args is not None and not (isinstance(version_args, list)
                                             and all(isinstance(arg, str) for arg in version_args)):
            raise BackendError("external backend: config 'version_args' must be a list of strings")
        self.version_args = version_args

    def argv(self, invocation: Invocation) -> list[str]:
        values = {
            "prompt_file": str(invocation.prompt_file), "repo": str(invocation.repo), "cwd": str(invocation.cwd),
            "scratch": str(invocation.scratch), "output_file": str(invocation.scratch / OUTPUT_FILE),
            "role": invocation.role, "model": invocation.model, "read_only": "1" if invocation.read_only else "0",
        }
        return [invocation.executable, *(part.format_map(values) for part in self.command[1:]),
                *invocation.extra_args]

    def version_argv(self, executable: str) -> list[str] | None:
        return [executable, *self.version_args] if self.version_args is not None else None

    def parse(self, *, stdout: str, invocation: Invocation) -> CliOutcome:
        written = invocation.scratch_file(OUTPUT_FILE)
        if written is not None and written.data is not None:
            try:
                value = json.loads(written.data.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                return CliOutcome(error=f"{OUTPUT_FILE} is not valid JSON: {error}")
            if isinstance(value, dict):
                return CliOutcome(output=value)
        return CliOutcome(output=json_output_extract(stdout))
