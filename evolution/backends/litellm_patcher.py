"""LiteLLMPatcherBackend ("litellm"): any LiteLLM model plays a role from the files the backend shows it.

Read-only roles get the role prompt, the request and the relevant files (see litellm_context) and answer with the
role's JSON. The implementer answers with the same JSON plus `edits` (search/replace, see litellm_edits); the backend
validates every edit against the workdir and only then writes them all. An invalid reply (not JSON, schema errors,
edits that do not apply, an implementer summary naming what neither the request, the files shown nor the edits hold:
evolution/summary_grounding.py) gets exactly one repair request carrying the problems; a second invalid reply fails
the role with those problems in RoleResult.error and the workdir untouched, except when only the summary is still
ungrounded: the edits are applied and the implement stage shows the diff's computed summary instead (issue 43). The
call, its retries, the JSON parsing and the repair request are the shared LLM client's (clear/llm.py); this backend
adds the deadline and cancel().

Config: model (required; a LiteLLM model string), api_base, api_key_env (the variable holding the key, read from the
request's env, else the process env), temperature (0), max_files (8), max_file_bytes (100 000), max_total_bytes
(300 000), max_listing (400), max_edit_files (20), and the model-call limits, which take precedence over the
CLEAR_JUDGE_* settings they default to (clear/llm_limits.py): max_tokens (every request's size; default the role's
size, EVOLUTION_ROLE_MAX_TOKENS, under the ceiling), max_tokens_ceiling (how far a reply cut by the limit may be
asked again: CLEAR_JUDGE_MAX_TOKENS, at least max_tokens), max_retries (CLEAR_JUDGE_MAX_RETRIES: connection errors,
5xx, 429s and timeouts), structured_output (auto|on|off|json_object_schema, CLEAR_JUDGE_STRUCTURED_OUTPUT: the role's reply schema in
response_format).
"""

from __future__ import annotations

import concurrent.futures
import copy
import http.client
import importlib.metadata
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clear.llm import LlmEndpoint, LlmReply, LlmUsage, cost_usd, litellm_load, llm_complete, llm_json_complete
from clear.llm_errors import llm_error_cause
from clear.llm_limits import (EVOLUTION_ROLE_MAX_TOKENS, llm_limits_from_settings, max_tokens_capped,
                              structured_output_mode)
from clear.text_grounding import GROUNDING_MARK
from evolution.errors import BackendError
from evolution.summary_grounding import implementer_summary_evidence, implementer_summary_problems

from .base import Access, CodingBackend, Preflight, RoleRequest, RoleResult
from .key_env import api_key_env_check
from .litellm_clients import litellm_clients_closed
from .litellm_context import repo_context_build
from .litellm_edits import EDIT_INSTRUCTIONS, EDITS_PROPERTY, edits_apply, edits_parse, edits_plan
from .schemas import output_validate

PREFLIGHT_TIMEOUT_S = 5.0
EXIT_FAILED = 1
EXIT_TIMED_OUT = 124
_INT_KEYS = {"max_files": 8, "max_file_bytes": 100_000, "max_total_bytes": 300_000, "max_listing": 400,
             "max_edit_files": 20, "max_retries": None}  # None: the CLEAR_JUDGE_* setting
ROLE_MAX_TOKENS_OTHER = 2048  # a role missing from EVOLUTION_ROLE_MAX_TOKENS


class _Stopped(Exception):
    def __init__(self, reason: str, *, timed_out: bool) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class LiteLLMPatcherBackend(CodingBackend):
    name = "litellm"

    def __init__(self, *, config: Mapping[str, Any]) -> None:
        super().__init__(config=config)
        self.model = str(config.get("model") or "")
        self.api_base = config.get("api_base") or None
        self.api_key_env = config.get("api_key_env") or None
        if self.api_key_env is not None and not isinstance(self.api_key_env, str):
            raise BackendError("litellm backend: config 'api_key_env' must be the name of an environment variable")
        api_key_env_check(name=self.api_key_env, backend=self.name)
        settings_limits = llm_limits_from_settings()
        self.limits: dict[str, int] = {}
        for key, default in _INT_KEYS.items():
            value = config.get(key, settings_limits.max_retries if default is None else default)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "max_retries" else 1):
                raise BackendError(f"litellm backend: config {key!r} must be a positive integer, got {value!r}")
            self.limits[key] = value
        self.temperature = config.get("temperature", 0.0)
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, int | float):
            raise BackendError(f"litellm backend: config 'temperature' must be a number, got {self.temperature!r}")
        self.max_tokens = config.get("max_tokens")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise BackendError(f"litellm backend: config 'max_tokens' must be a positive integer, got "
                               f"{self.max_tokens!r}")
        ceiling = config.get("max_tokens_ceiling")
        if ceiling is not None and (isinstance(ceiling, bool) or not isinstance(ceiling, int) or ceiling < 1):
            raise BackendError(f"litellm backend: config 'max_tokens_ceiling' must be a positive integer, got "
                               f"{ceiling!r}")
        self.max_tokens_ceiling: int = max(ceiling or settings_limits.max_tokens, self.max_tokens or 0)
        try:
            self.structured_output = structured_output_mode(
                value=config.get("structured_output", settings_limits.structured_output), name="structured_output")
        except ValueError as error:
            raise BackendError(f"litellm backend: config {error}") from error
        self._cancelled = threading.Event()

    # -- preflight ---------------------------------------------------------------------------------------------

    def preflight(self) -> Preflight:
        try:
            version = f"litellm {importlib.metadata.version('litellm')}"
        except importlib.metadata.PackageNotFoundError:
            return Preflight(ok=False, error="litellm is not installed")
        if not self.model:
            return Preflight(ok=False, version=version, error="no model configured: set config 'model' to a "
                             "LiteLLM model string such as 'openai/gpt-4o-mini' or 'ollama/llama3'")
        version = f"{version}, model {self.model}"
        if self.api_key_env and not _env_value(self.api_key_env, {}):
            return Preflight(ok=False, version=version,
                             error=f"the API key variable {self.api_key_env} (config api_key_env) is not set")
        if not self.api_base:
            try:
                litellm_load().get_llm_provider(self.model)
            except Exception as error:  # noqa: BLE001 - preflight reports, never raises
                return Preflight(ok=False, version=version, error=f"LiteLLM does not know the provider of "
                                 f"{self.model!r}: {str(error)[:300]}")
            return Preflight(ok=True, version=version)
        try:
            urllib.request.urlopen(self.api_base.rstrip("/") + "/models", timeout=PREFLIGHT_TIMEOUT_S).close()
        except urllib.error.HTTPError:
            pass  # any HTTP answer (401, 404, 501...) shows the server is up; only the transport matters here
        # http.client.InvalidURL (a port that is no number) is no ValueError.
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", error)
            return Preflight(ok=False, version=version, error=f"the API base {self.api_base} does not answer: {reason}")
        return Preflight(ok=True, version=version)

    def cancel(self) -> None:
        self._cancelled.set()

    # -- one role ----------------------------------------------------------------------------------------------

    def run_role(self, request: RoleRequest) -> RoleResult:
        started = time.monotonic()
        request.log_dir.mkdir(parents=True, exist_ok=True)
        transcript = request.log_dir / f"{request.role}-i{request.iteration}-r{request.round}.litellm.jsonl"
        run = _Run(backend=self, request=request, started=started, transcript=transcript)
        # The role is the unit of use of its connections: none outlives it (see litellm_clients).
        with litellm_clients_closed():
            try:
                return run.execute()
            except _Stopped as stop:
                return run.result(exit_code=EXIT_TIMED_OUT if stop.timed_out else EXIT_FAILED, error=str(stop),
                                  timed_out=stop.timed_out)


def _env_value(name: str, request_env: Mapping[str, str]) -> str:
    return request_env.get(name) or os.environ.get(name, "")


def _reply_schema(output_schema: dict, edit_mode: bool) -> dict:
    if not edit_mode:
        return output_schema
    schema = copy.deepcopy(output_schema)
    schema.setdefault("properties", {})["edits"] = EDITS_PROPERTY
    schema["required"] = [*schema.get("required", []), "edits"]
    return schema


class _Run:
    """State of one run_role call: the conversation, the usage totals and the transcript."""

    def __init__(self, *, backend: LiteLLMPatcherBackend, request: RoleRequest, started: float,
                 transcript: Path) -> None:
        self.backend, self.request, self.started, self.transcript = backend, request, started, transcript
        self.edit_mode = request.access == Access.READ_WRITE
        self.schema = _reply_schema(request.output_schema, self.edit_mode)
        self.usage = LlmUsage()
        self.cost = 0.0
        self.raw = ""
        self.model = backend.model
        self.writes: list = []
        self.messages: list[dict] = []

    def result(self, *, exit_code: int, error: str = "", output: dict | None = None,
               timed_out: bool = False) -> RoleResult:
        self._log({"event": "result", "exit_code": exit_code, "error": error, "output": output})
        return RoleResult(exit_code=exit_code, timed_out=timed_out, output=output, raw_output=self.raw,
                          transcript_path=self.transcript, tokens_in=self.usage.input_tokens,
                          tokens_out=self.usage.output_tokens, cost_usd=self.cost,
                          elapsed_s=round(time.monotonic() - self.started, 3), model=self.model, error=error)

    def _log(self, entry: dict) -> None:
        with self.transcript.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")

    def _logged_reply(self, attempt: int, content: str, problems: list[str]) -> None:
        self.raw = content
        self._log({"event": "reply", "attempt": attempt, "content": content, "problems": problems})

    def execute(self) -> RoleResult:
        backend, request = self.backend, self.request
        if not backend.model:
            return self.result(exit_code=EXIT_FAILED, error="litellm backend: no model configured (config 'model')")
        if backend.api_key_env and not _env_value(backend.api_key_env, request.env):
            return self.result(exit_code=EXIT_FAILED, error=f"litellm backend: the API key variable "
                               f"{backend.api_key_env} (config api_key_env) is not set")
        messages = self._messages()
        self._log({"event": "request", "role": str(request.role), "iteration": request.iteration,
                   "round": request.round, "access": str(request.access), "messages": messages})
        self.messages = messages
        reply = llm_json_complete(messages=messages, complete=self._complete, check=self._check, repair_chars=3000,
                                  on_reply=self._logged_reply)
        fatal = [problem for problem in reply.problems if GROUNDING_MARK not in problem]
        if fatal:
            return self.result(exit_code=EXIT_FAILED,
                               error="rejected after one repair round: " + "; ".join(reply.problems)[:2000])
        if reply.problems:  # only the summary is still ungrounded: the edits stand, the stage replaces the summary
            self._log({"event": "summary_not_grounded", "problems": reply.problems})
        output = {key: item for key, item in reply.value.items() if key != "edits"}
        if self.edit_mode:
            try:
                changed = edits_apply(writes=self.writes)
            except OSError as error:
                return self.result(exit_code=EXIT_FAILED, error=f"could not write the edits: {error}")
            self._log({"event": "applied", "files": changed})
        return self.result(exit_code=0, output=output)

    def _messages(self) -> list[dict]:
        request, limits = self.request, self.backend.limits
        context = repo_context_build(
            workdir=request.workdir, user_input=request.user_input, extra_ro_dirs=tuple(request.extra_ro_dirs),
            max_files=limits["max_files"], max_file_bytes=limits["max_file_bytes"],
            max_total_bytes=limits["max_total_bytes"], max_listing=limits["max_listing"],
        )
        reply = ("Reply with exactly one JSON object and nothing else (no prose, no code fence). It must satisfy "
                 "this JSON schema:\n" + json.dumps(self.schema, indent=1, sort_keys=True))
        access = (EDIT_INSTRUCTIONS if self.edit_mode else
                  "You cannot run commands, open files or change anything: the files you may need are in the "
                  "message. If one you need is not shown, say so in your reply.")
        system = f"{request.system_prompt.rstrip()}\n\n{access}\n\n{reply}"
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"{request.user_input.rstrip()}\n\n{context.render()}"}]

    def _check(self, value: dict) -> list[str]:
        """The reply's problems; on an edit reply that passes, the planned writes are kept for execute()."""
        self.writes = []
        problems = output_validate(value=value, schema=self.schema)
        if problems or not self.edit_mode:
            return problems
        edits, problems = edits_parse(value=value.get("edits"))
        if problems:
            return problems
        limits = self.backend.limits
        self.writes, problems = edits_plan(workdir=self.request.workdir, edits=edits,
                                           max_file_bytes=limits["max_file_bytes"], max_files=limits["max_edit_files"])
        if problems:
            return problems
        # The summary the job page shows names only what the request, the files shown and the edits hold (issue 43).
        evidence = implementer_summary_evidence(texts=[
            *(message["content"] for message in self.messages),
            *(text for write in self.writes for text in (write.relative, write.content, write.original or ""))])
        return implementer_summary_problems(output=value, evidence=evidence)

    # -- the model call ----------------------------------------------------------------------------------------

    def _remaining(self) -> float:
        remaining = self.request.timeout_s - (time.monotonic() - self.started)
        if remaining <= 0:
            raise _Stopped(f"timed out after {self.request.timeout_s:g} s", timed_out=True)
        if self.backend._cancelled.is_set():
            raise _Stopped("cancelled", timed_out=False)
        return remaining

    def _complete(self, messages: list[dict]) -> LlmReply:
        """One completion (transient failures retried by the client) cut by cancel() and the role's deadline."""
        backend, role = self.backend, str(self.request.role)
        size = backend.max_tokens or max_tokens_capped(
            wanted=EVOLUTION_ROLE_MAX_TOKENS.get(role, ROLE_MAX_TOKENS_OTHER), ceiling=backend.max_tokens_ceiling)
        endpoint = LlmEndpoint(
            model=backend.model, api_base=backend.api_base, temperature=backend.temperature,
            api_key=_env_value(backend.api_key_env, self.request.env) if backend.api_key_env else None,
            timeout=self.request.timeout_s, max_retries=backend.limits["max_retries"], max_tokens=size,
            max_tokens_ceiling=backend.max_tokens_ceiling, structured_output=backend.structured_output,
        )
        try:
            reply = llm_complete(endpoint=endpoint, messages=messages, usage=self.usage, schema=self.schema,
                                 schema_name=f"evolution_{role}", remaining=self._remaining, runner=self._wait)
        except _Stopped:
            raise
        except Exception as error:  # noqa: BLE001 - a provider error fails the role with its message
            raise _Stopped(f"model call failed ({llm_error_cause(error=error)}): {type(error).__name__}: "
                           f"{str(error)[:500]}", timed_out=isinstance(error, litellm_load().Timeout)) from error
        self.model = reply.model
        # LiteLLM's own cost first: it knows provider details (cached or reasoning tokens) the table does not.
        cost = reply.provider_cost
        if cost is None:
            cost = cost_usd(model=backend.model, input_tokens=reply.input_tokens,
                            output_tokens=reply.output_tokens) or 0.0
        self.cost += cost
        return reply

    def _wait(self, call, remaining: float):
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = pool.submit(call)
        pool.shutdown(wait=False)  # an abandoned call finishes (and is dropped) in the background
        deadline = time.monotonic() + remaining
        while True:
            try:
                return future.result(timeout=0.2)
            except concurrent.futures.TimeoutError:
                if self.backend._cancelled.is_set():
                    raise _Stopped("cancelled", timed_out=False) from None
                if time.monotonic() >= deadline:
                    raise _Stopped(f"timed out after {self.request.timeout_s:g} s", timed_out=True) from None
