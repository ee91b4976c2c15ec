"""Claude Code: `claude -p <prompt> --output-format json`, one result envelope on stdout."""

from __future__ import annotations

import json
import os

from .base import CliOutcome, CliTemplate, Invocation
from .output import json_lines, json_output_extract

# Read-only roles may not edit even where the sandbox would let them (the subprocess level has no mounts).
READ_ONLY_DISALLOWED = ("Edit", "MultiEdit", "Write", "NotebookEdit")


def _envelope(stdout: str) -> dict | None:
    """The `result` object: the whole stdout, the `result` element of a JSON array, or the last result line."""
    try:
        value = json.loads(stdout)
    except (json.JSONDecodeError, ValueError):
        value = json_lines(stdout)
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        results = [item for item in value if isinstance(item, dict) and item.get("type") == "result"]
        return results[-1] if results else None
    return None


def _positional(text: str) -> str:
    # A leading dash would be read as an option.
    return " " + text if text.startswith("-") else text


class ClaudeTemplate(CliTemplate):
    name = "claude"
    executable = "claude"
    default_api_key_env = "ANTHROPIC_API_KEY"
    default_model_url = "https://api.anthropic.com"
    install_hint = "npm install -g @anthropic-ai/claude-code"

    def argv(self, invocation: Invocation) -> list[str]:
        argv = [invocation.executable, "-p", _positional(invocation.prompt_argument(invocation.user_prompt)),
                "--output-format", "json", "--append-system-prompt", invocation.system_prompt,
                "--dangerously-skip-permissions"]
        if invocation.model:
            argv += ["--model", invocation.model]
        if invocation.resume_session_id:
            argv += ["--resume", invocation.resume_session_id]
        add_dirs = [invocation.repo] if invocation.read_only else []
        add_dirs += [invocation.prompt_file.parent, *invocation.extra_ro_dirs]
        argv += [*invocation.extra_args, "--add-dir", *(str(path) for path in add_dirs)]
        if invocation.read_only:
            argv += ["--disallowedTools", *READ_ONLY_DISALLOWED]
        return argv

    def env(self, invocation: Invocation) -> dict[str, str]:
        # As root, Claude Code refuses --dangerously-skip-permissions unless told it runs in a sandbox, which it does.
        return {"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}

    def parse(self, *, stdout: str, invocation: Invocation) -> CliOutcome:
        envelope = _envelope(stdout)
        if envelope is None:
            return CliOutcome(output=json_output_extract(stdout))
        usage = envelope.get("usage") or {}
        tokens_in = sum(int(usage.get(key) or 0) for key in
                        ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        result = envelope.get("result")
        output = envelope.get("structured_output")
        if not isinstance(output, dict):
            output = json_output_extract(result) if isinstance(result, str) else None
        return CliOutcome(
            output=output, session_id=envelope.get("session_id"), tokens_in=tokens_in,
            tokens_out=int(usage.get("output_tokens") or 0), cost_usd=float(envelope.get("total_cost_usd") or 0.0),
            model=next(iter(envelope.get("modelUsage") or {}), ""),
            error=f"claude reported an error: {str(result)[:500]}" if envelope.get("is_error") else "",
        )
