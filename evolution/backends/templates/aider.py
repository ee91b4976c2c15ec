"""Aider: `aider --message-file F --yes-always --no-auto-commits [files]`; the orchestrator commits."""

from __future__ import annotations

import re
import shutil

from ..litellm_context import mentioned_paths, repo_listing
from .base import CliOutcome, CliTemplate, Invocation
from .output import json_output_extract

_TOKENS = re.compile(r"Tokens:\s*([\d.,]+)(k?)\s*sent.*?([\d.,]+)(k?)\s*received", re.IGNORECASE)
_COST = re.compile(r"Cost:\s*\$([\d.]+)\s*message", re.IGNORECASE)
MAX_FILES = 20


def _count(number: str, kilo: str) -> int:
    value = float(number.replace(",", ""))
    return int(value * 1000) if kilo else int(value)


class AiderTemplate(CliTemplate):
    name = "aider"
    executable = "aider"
    default_api_key_env = "OPENAI_API_KEY"
    default_model_url = "https://api.openai.com"
    install_hint = "python -m pip install aider-install && aider-install"

    def argv(self, invocation: Invocation) -> list[str]:
        # Histories go to the scratch dir and .gitignore stays as it is: the repo must only change by the role.
        argv = [invocation.executable, "--message-file", str(invocation.prompt_file), "--yes-always",
                "--no-auto-commits", "--no-gitignore", "--no-check-update", "--no-show-release-notes", "--no-pretty",
                "--no-stream", "--analytics-disable",
                "--chat-history-file", str(invocation.scratch / "aider.chat.history.md"),
                "--input-history-file", str(invocation.scratch / "aider.input.history")]
        if invocation.model:
            argv += ["--model", invocation.model]
        # Aider edits only the files in its chat, so the ones the request names are added up front.
        listing = repo_listing(workdir=invocation.repo)
        files = [str(invocation.repo / path) for path in
                 mentioned_paths(texts=[invocation.user_prompt], listing=listing)[:MAX_FILES]]
        if invocation.read_only:
            argv += ["--chat-mode", "ask", "--no-git"]
            for path in files:
                argv += ["--read", path]
            files = []
        return [*argv, *invocation.extra_args, *files]

    def cleanup(self, invocation: Invocation) -> None:
        for cache in invocation.repo.glob(".aider.tags.cache.v*"):
            shutil.rmtree(cache, ignore_errors=True)

    def parse(self, *, stdout: str, invocation: Invocation) -> CliOutcome:
        outcome = CliOutcome(output=json_output_extract(stdout), model=invocation.model)
        for sent, sent_k, received, received_k in _TOKENS.findall(stdout):
            outcome.tokens_in += _count(sent, sent_k)
            outcome.tokens_out += _count(received, received_k)
        outcome.cost_usd = sum(float(cost) for cost in _COST.findall(stdout))
        return outcome
