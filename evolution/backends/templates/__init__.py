"""Command-line templates of the external backend: how to call each coding-agent CLI and read what it printed.

A template turns one Invocation (the role request plus the files the backend prepared) into an argv, and the CLI's
stdout (plus any file it wrote in the scratch dir) into a CliOutcome. Adding a CLI = one module here + TEMPLATES.
"""

from __future__ import annotations

from .aider import AiderTemplate
from .base import CliOutcome, CliTemplate, Invocation
from .claude import ClaudeTemplate
from .codex import CodexTemplate
from .custom import CustomTemplate
from .mini import MiniSweAgentTemplate

TEMPLATES: dict[str, type[CliTemplate]] = {
    template.name: template
    for template in (ClaudeTemplate, CodexTemplate, AiderTemplate, MiniSweAgentTemplate, CustomTemplate)
}

__all__ = ["TEMPLATES", "CliOutcome", "CliTemplate", "Invocation"]
