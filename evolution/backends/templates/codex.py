"""Codex CLI: `codex exec --json -C <repo> ...`, JSON-lines events on stdout, the last message in a file."""

from __future__ import annotations

from .base import CliOutcome, CliTemplate, Invocation
from .output import json_lines, json_output_extract

LAST_MESSAGE_FILE = "codex-last-message.md"


class CodexTemplate(CliTemplate):
    name = "codex"
    executable = "codex"
    default_api_key_env = "OPENAI_API_KEY"
    default_model_url = "https://api.openai.com"
    install_hint = "npm install -g @openai/codex"

    def argv(self, invocation: Invocation) -> list[str]:
        # Codex's own sandbox needs user namespaces it cannot create inside ours; ours does the confining.
        argv = [invocation.executable, "exec", "--json", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                "-c", 'approval_policy="never"', "-c", 'history.persistence="none"',
                "-C", str(invocation.repo), "--output-last-message", str(invocation.scratch / LAST_MESSAGE_FILE)]
        if invocation.model:
            argv += ["-m", invocation.model]
        for path in (invocation.prompt_file.parent, *invocation.extra_ro_dirs):
            argv += ["--add-dir", str(path)]
        argv += list(invocation.extra_args)
        # The system prompt travels in the prompt file's text: one document, no TOML quoting of a long string.
        prompt = invocation.prompt_argument(invocation.prompt_file.read_text(encoding="utf-8"))
        if invocation.resume_session_id:
            return [*argv, "resume", invocation.resume_session_id, prompt]
        return [*argv, prompt]

    def parse(self, *, stdout: str, invocation: Invocation) -> CliOutcome:
        outcome = CliOutcome(model=invocation.model)
        last_message, errors = "", []
        for event in json_lines(stdout):
            kind = event.get("type")
            if kind == "thread.started":
                outcome.session_id = event.get("thread_id") or outcome.session_id
            elif kind == "turn.completed":
                usage = event.get("usage") or {}
                outcome.tokens_in += int(usage.get("input_tokens") or 0)
                outcome.tokens_out += int(usage.get("output_tokens") or 0)
            elif kind == "item.completed" and (event.get("item") or {}).get("type") == "agent_message":
                last_message = event["item"].get("text") or last_message
            elif kind in ("error", "turn.failed"):
                errors.append(str(event.get("message") or (event.get("error") or {}).get("message") or event))
        written = invocation.scratch_file(LAST_MESSAGE_FILE)
        if written is not None and written.data is not None:
            last_message = written.data.decode("utf-8", errors="replace") or last_message
        outcome.output = json_output_extract(last_message)
        if errors:
            outcome.error = "codex reported: " + "; ".join(errors)[:500]
        return outcome
