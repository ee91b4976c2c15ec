"""mini-swe-agent: `mini -t <task> -y --exit-immediately -o traj.json`; the answer is the trajectory's submission."""

from __future__ import annotations

import json

from .base import CliOutcome, CliTemplate, Invocation
from .output import json_output_extract

TRAJECTORY_FILE = "traj.json"


class MiniSweAgentTemplate(CliTemplate):
    name = "mini-swe-agent"
    executable = "mini"
    default_api_key_env = "OPENAI_API_KEY"
    default_model_url = "https://api.openai.com"
    install_hint = "python -m pip install mini-swe-agent"

    def argv(self, invocation: Invocation) -> list[str]:
        prompt = invocation.prompt_argument(invocation.prompt_file.read_text(encoding="utf-8"))
        argv = [invocation.executable, "-t", prompt, "-y", "--exit-immediately",
                "-o", str(invocation.scratch / TRAJECTORY_FILE)]
        if invocation.model:
            argv += ["-m", invocation.model]
        config_file = (invocation.options or {}).get("mini_config")
        if config_file:
            argv += ["-c", str(config_file)]
        return [*argv, *invocation.extra_args]

    def env(self, invocation: Invocation) -> dict[str, str]:
        # Without it mini starts its interactive first-run setup and waits for a terminal.
        return {"MSWEA_CONFIGURED": "true"}

    def parse(self, *, stdout: str, invocation: Invocation) -> CliOutcome:
        outcome = CliOutcome(model=invocation.model)
        path = invocation.scratch / TRAJECTORY_FILE
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            outcome.output = json_output_extract(stdout)
            outcome.error = "" if outcome.output else f"mini-swe-agent left no readable {TRAJECTORY_FILE}: {error}"
            return outcome
        info = trajectory.get("info") or {}
        stats = info.get("model_stats") or {}
        outcome.cost_usd = float(stats.get("instance_cost") or 0.0)
        texts = [str(info.get("submission") or "")]
        texts += [str(message.get("content") or "") for message in reversed(trajectory.get("messages") or [])
                  if isinstance(message, dict) and message.get("role") == "assistant"][:1]
        for text in texts:
            outcome.output = json_output_extract(text)
            if outcome.output is not None:
                break
        if info.get("exit_status") not in (None, "Submitted"):
            outcome.error = f"mini-swe-agent exited with status {info.get('exit_status')}"
        return outcome
