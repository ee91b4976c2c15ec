"""mini-swe-agent: `mini -t <task> -y --exit-immediately -o traj.json`; the answer is the trajectory's submission."""

from __future__ import annotations

import json

from .base import CliOutcome, CliTemplate, Invocation
from .output import json_output_extract

TRAJECTORY_FILE = "traj.json"
# Every message of the run is in it: far more than the 1 MB other files a CLI writes are allowed.
TRAJECTORY_MAX_BYTES = 32 * 1024 * 1024


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
        written = invocation.scratch_file(TRAJECTORY_FILE, max_bytes=TRAJECTORY_MAX_BYTES)
        problem = "there is none" if written is None else f"skipped: {written.skipped}" if written.data is None else ""
        trajectory = None
        if not problem:
            try:
                trajectory = json.loads(written.data.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                problem = str(error)
        if not isinstance(trajectory, dict):
            outcome.output = json_output_extract(stdout)
            problem = problem or "not a JSON object"
            outcome.error = "" if outcome.output else f"mini-swe-agent left no readable {TRAJECTORY_FILE}: {problem}"
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
