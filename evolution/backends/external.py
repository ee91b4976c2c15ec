"""ExternalCommandBackend ("external"): a coding-agent CLI (Claude Code, Codex, Aider, mini-swe-agent or any command)
plays a role, inside the sandbox, with a cleared environment holding only the one API key it needs.

Config: template ("claude" | "codex" | "aider" | "mini-swe-agent" | "custom"), command (custom only; see
templates/custom.py), api_key_env (default: the template's, e.g. ANTHROPIC_API_KEY for claude; "" for none), model,
timeout (s, caps the request's), executable (a path or name overriding the template's program), extra_args (list),
env (literal non-secret variables, e.g. a base URL), model_url (the model API the CLI talks to, default the
template's, e.g. https://api.anthropic.com: the CLI's only network destination, through the sandbox's egress proxy;
an http:// base URL of that host in env is rewritten to the proxy's address), sandbox_level, memory_bytes (address-space cap; none by
default because Node-based CLIs reserve far more address space than they use), mini_config (mini-swe-agent -c).

The role's workdir is the CLI's writable cwd for read_write roles; for read_only roles it is mounted read-only and the
CLI runs in a scratch dir (the subprocess level has no mounts: there the orchestrator's tree-hash check catches
writes). The prompt file, stdout and stderr are kept in log_dir; the role's JSON is taken from the CLI's output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clear.llm import price_per_token
from evolution.errors import BackendError, SandboxUnavailable
from evolution.sandbox import Limits, sandbox_runner_get
from evolution.sandbox.egress import EgressProxy, egress_from_url
from evolution.sandbox.files import owner_limits
from evolution.sandbox.types import sandbox_base_env

from .base import Access, CodingBackend, Preflight, RoleRequest, RoleResult
from .key_env import api_key_env_check
from .templates import TEMPLATES, CliTemplate, Invocation

PREFLIGHT_TIMEOUT_S = 15.0
STDOUT_CAP = 20_000_000  # stream-json transcripts run to megabytes
EXIT_FAILED = 1


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


class ExternalCommandBackend(CodingBackend):
    name = "external"

    def __init__(self, *, config: Mapping[str, Any]) -> None:
        super().__init__(config=config)
        template_name = config.get("template")
        if template_name not in TEMPLATES:
            raise BackendError(f"external backend: config 'template' must be one of {', '.join(TEMPLATES)}, got "
                               f"{template_name!r}")
        self.template: CliTemplate = TEMPLATES[template_name](config=config)
        api_key_env = config.get("api_key_env", self.template.default_api_key_env)
        if api_key_env is not None and not isinstance(api_key_env, str):
            raise BackendError("external backend: config 'api_key_env' must be the name of an environment variable")
        api_key_env_check(name=api_key_env, backend=self.name)
        self.api_key_env = api_key_env or None
        self.model = config.get("model") or ""
        self.timeout = config.get("timeout")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float)
                                         or self.timeout <= 0):
            raise BackendError(f"external backend: config 'timeout' must be a positive number of seconds, got "
                               f"{self.timeout!r}")
        self.extra_args = config.get("extra_args", [])
        if not _strings(self.extra_args):
            raise BackendError("external backend: config 'extra_args' must be a list of strings")
        self.literal_env = dict(config.get("env") or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.literal_env.items()):
            raise BackendError("external backend: config 'env' must map variable names to string values")
        self.egress = self._egress(config.get("model_url", self.template.default_model_url))
        self.memory_bytes = config.get("memory_bytes")
        self.sandbox_level = config.get("sandbox_level")
        self.program = config.get("executable") or getattr(self.template, "program", "") or self.template.executable
        self._cancelled = threading.Event()

    @staticmethod
    def _egress(model_url: Any) -> tuple[str, int] | None:
        # The CLI's one way out of the sandbox: the model host and port, through the egress proxy; none without one.
        if not model_url:
            return None
        if not isinstance(model_url, str):
            raise BackendError("external backend: config 'model_url' must be the model API's URL, e.g. "
                               "https://api.anthropic.com")
        try:
            return egress_from_url(model_url)
        except ValueError as error:
            raise BackendError(f"external backend: config 'model_url': {error}") from error

    def _executable(self) -> str | None:
        return shutil.which(self.program)

    def preflight(self) -> Preflight:
        try:
            return self._preflight()
        except Exception as error:  # noqa: BLE001 - preflight reports, never raises
            return Preflight(ok=False, error=f"preflight failed: {type(error).__name__}: {error}")

    def _preflight(self) -> Preflight:
        executable = self._executable()
        if not executable:
            return Preflight(ok=False, error=f"{self.program!r} is not on PATH: install it "
                             f"({self.template.install_hint}) or set config 'executable' to its path")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            return Preflight(ok=False, version=executable,
                             error=f"the API key variable {self.api_key_env} (config api_key_env) is not set")
        argv = self.template.version_argv(executable)
        if argv is None:
            return Preflight(ok=True, version=executable)
        # The executable is whatever the job's config names: its --version runs contained like the role itself.
        try:
            runner = sandbox_runner_get(level=self.sandbox_level)
        except SandboxUnavailable as error:
            return Preflight(ok=False, error=error.message)
        with tempfile.TemporaryDirectory(prefix="clear-preflight-") as home:
            answer = runner.run(cmd=argv, workdir=Path(home), env={"PATH": self._path(executable)},
                                ro_paths=[Path(executable).resolve().parent, Path(executable).parent],
                                limits=Limits(wall_s=PREFLIGHT_TIMEOUT_S, memory_bytes=self.memory_bytes))
        if answer.timed_out:
            return Preflight(ok=False, error=f"`{' '.join(argv)}` did not answer in {PREFLIGHT_TIMEOUT_S:g} s")
        lines = [line.strip() for line in (answer.stdout + "\n" + answer.stderr).splitlines() if line.strip()]
        if answer.exit_code != 0:
            return Preflight(ok=False, error=f"`{' '.join(argv)}` exited with {answer.exit_code}: "
                             f"{' '.join(lines)[-500:]}")
        return Preflight(ok=True, version=lines[0][:200] if lines else executable)

    def cancel(self) -> None:
        self._cancelled.set()

    @staticmethod
    def _path(executable: str) -> str:
        # The CLI's own directory first: `#!/usr/bin/env node` style launchers find their runtime next to them.
        return f"{os.path.dirname(executable)}:{sandbox_base_env(home='', tmpdir='', env=None)['PATH']}"

    def _instructions(self, request: RoleRequest) -> str:
        if request.access == Access.READ_ONLY:
            access = (f"The repository is at {request.workdir}. It is read-only for this role: read and search it, "
                      "change nothing.")
        else:
            access = (f"The repository is at {request.workdir} (your working directory). Edit its files in place; "
                      "do not commit, branch or stash: the orchestrator commits your change.")
        artifacts = "".join(f"\nEarlier stages' artifacts (read-only): {path}" for path in request.extra_ro_dirs)
        schema = json.dumps(request.output_schema, indent=1, sort_keys=True)
        return (f"## Where and how to answer\n{access}{artifacts}\n\nWhen you are done, end your final message with "
                f"one fenced ```json block holding a single JSON object that satisfies this JSON schema:\n```json\n"
                f"{schema}\n```")

    def run_role(self, request: RoleRequest) -> RoleResult:
        started = time.monotonic()
        template = self.template
        stem = f"{request.role}-i{request.iteration}-r{request.round}.{template.name}"
        request.log_dir.mkdir(parents=True, exist_ok=True)
        scratch = request.log_dir / f"{stem}.scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()

        def fail(error: str) -> RoleResult:
            return RoleResult(exit_code=EXIT_FAILED, timed_out=False, output=None, raw_output="", transcript_path=None,
                              elapsed_s=round(time.monotonic() - started, 3), model=self.model, error=error)

        executable = self._executable()
        if not executable:
            return fail(f"{self.program!r} is not on PATH: install it ({template.install_hint})")
        env = {"PATH": self._path(executable)}
        if self.api_key_env:
            value = request.env.get(self.api_key_env) or os.environ.get(self.api_key_env)
            if not value:
                return fail(f"the API key variable {self.api_key_env} (config api_key_env) is not set")
        read_only = request.access == Access.READ_ONLY
        system_prompt = f"{request.system_prompt.rstrip()}\n\n{self._instructions(request)}"
        prompt_file = request.log_dir / f"{stem}.prompt.md"
        prompt_file.write_text(f"{system_prompt}\n\n---\n\n{request.user_input}", encoding="utf-8")
        invocation = Invocation(
            executable=executable, role=str(request.role), read_only=read_only, repo=Path(request.workdir),
            cwd=scratch if read_only else Path(request.workdir), scratch=scratch, prompt_file=prompt_file,
            system_prompt=system_prompt, user_prompt=request.user_input, extra_ro_dirs=tuple(request.extra_ro_dirs),
            model=self.model, resume_session_id=request.resume_session_id, extra_args=tuple(self.extra_args),
            options=self.config,
        )
        argv = template.argv(invocation)
        env.update(template.env(invocation))
        env.update(self.literal_env)
        if self.egress is not None:
            # An http:// base URL of the model host (a local model server) is reached at the relay's address.
            local = EgressProxy(host=self.egress[0], port=self.egress[1])
            env = {name: local.local_url(value) for name, value in env.items()}
        if self.api_key_env:
            env[self.api_key_env] = value  # set last: config 'env' cannot shadow or add a second secret
        try:
            runner = sandbox_runner_get(level=self.sandbox_level)
        except SandboxUnavailable as error:
            return fail(error.message)
        # What the CLI leaves in its scratch dir is read only if this run's user wrote it.
        invocation = dataclasses.replace(invocation, scratch_writers=frozenset(owner_limits(level=runner.level)))
        ro_paths = [request.log_dir, Path(executable).resolve().parent, Path(executable).parent,
                    *request.extra_ro_dirs, *([request.workdir] if read_only else [])]
        wall = min(request.timeout_s, self.timeout) if self.timeout else request.timeout_s
        (request.log_dir / f"{stem}.argv.json").write_text(json.dumps(
            [arg if len(arg) < 2000 else f"<{len(arg)} characters, see {prompt_file.name}>" for arg in argv],
            indent=1), encoding="utf-8")
        proc = runner.run(
            cmd=argv, workdir=invocation.cwd, rw_paths=[] if read_only else [scratch], ro_paths=ro_paths, env=env,
            limits=Limits(wall_s=wall, memory_bytes=self.memory_bytes, nofile=4096), egress=self.egress,
            stdout_cap=STDOUT_CAP, should_stop=self._cancelled.is_set,
        )
        stdout_log = request.log_dir / f"{stem}.stdout.log"
        stdout_log.write_text(proc.stdout, encoding="utf-8")
        (request.log_dir / f"{stem}.stderr.log").write_text(proc.stderr, encoding="utf-8")
        if not read_only:
            template.cleanup(invocation)
        outcome = template.parse(stdout=proc.stdout, invocation=invocation)
        if not outcome.cost_usd and (outcome.tokens_in or outcome.tokens_out) and (outcome.model or self.model):
            price = price_per_token(model=outcome.model or self.model)
            if price:
                outcome.cost_usd = outcome.tokens_in * price[0] + outcome.tokens_out * price[1]
        exit_code = proc.exit_code if proc.exit_code is not None else 128 + (proc.signal or 0)
        return RoleResult(
            exit_code=exit_code, timed_out=proc.timed_out, output=outcome.output, raw_output=proc.stdout[-200_000:],
            transcript_path=stdout_log, session_id=outcome.session_id, tokens_in=outcome.tokens_in,
            tokens_out=outcome.tokens_out, cost_usd=outcome.cost_usd, elapsed_s=round(time.monotonic() - started, 3),
            model=outcome.model or self.model, error=self._error(proc, outcome, wall, executable),
        )

    def _error(self, proc, outcome, wall: float, executable: str) -> str:
        name = os.path.basename(executable)
        if proc.timed_out:
            return f"{name} timed out after {wall:g} s"
        if proc.cancelled:
            return "cancelled"
        if proc.exit_code != 0:
            tail = " ".join(proc.stderr.strip().splitlines()[-5:])[-500:]
            how = f"was killed by signal {proc.signal}" if proc.exit_code is None else f"exited with {proc.exit_code}"
            return f"{name} {how}: {tail or outcome.error or 'no error output'}"
        if outcome.error:
            return outcome.error
        if outcome.output is None:
            return f"no JSON object found in the output of {name} (see the transcript)"
        return ""
