"""ScriptedBackend ("scripted"): plays every role from a JSON script, with no model and no network.

Config: {"script": {...}} or {"script_path": "path.json"} (a relative path is taken from the repository root).
Script: {"entries": [...], "defaults": {role: entry}}. An entry names role, iteration and round (an int or "*";
missing means "*") and may hold: output (the role's JSON), raw_output (text returned verbatim instead, parsed if it
is a JSON object: for malformed-output tests), edits, sleep_s, exit_code, violate_readonly, crash, tokens_in,
tokens_out, cost_usd. Lookup: exact (iteration, round), then (iteration, "*"), then ("*", round), then ("*", "*"),
then defaults[role]. Every request is appended to log_dir/prompts.jsonl so tests can assert on the prompts.
"""

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from evolution.backends.base import Access, CodingBackend, Preflight, Role, RoleRequest, RoleResult
from evolution.errors import BackendCrashed, BackendError, GitError
from evolution.sandbox.files import owner_limits, written_file_read

ANY = "*"
SLEEP_STEP_S = 0.05
EXIT_TIMED_OUT = 124
EXIT_CANCELLED = 130
VIOLATION_FILE = "SCRIPTED_VIOLATION.txt"
SCRIPTED_FILE_MAX_BYTES = 16 * 1024 * 1024  # a file a "replace" edit may change
_ENTRY_KEYS = {"role", "iteration", "round", "output", "raw_output", "edits", "sleep_s", "exit_code",
               "violate_readonly", "crash", "tokens_in", "tokens_out", "cost_usd"}
_ROLES = ", ".join(role.value for role in Role)


def _entry_check(entry: Any, *, where: str, keyed: bool) -> None:
    if not isinstance(entry, dict):
        raise BackendError(f"scripted backend: {where} must be an object")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise BackendError(f"scripted backend: {where} has unknown key(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(_ENTRY_KEYS))}")
    if keyed and entry.get("role") not in {role.value for role in Role}:
        raise BackendError(f"scripted backend: {where} needs a role, one of {_ROLES}; got {entry.get('role')!r}")
    for key in ("iteration", "round"):
        value = entry.get(key, ANY)
        if value != ANY and (isinstance(value, bool) or not isinstance(value, int)):
            raise BackendError(f"scripted backend: {where}.{key} must be an integer or \"*\", got {value!r}")
    if "output" in entry and entry["output"] is not None and not isinstance(entry["output"], dict):
        raise BackendError(f"scripted backend: {where}.output must be a JSON object")
    if "raw_output" in entry and not isinstance(entry["raw_output"], str):
        raise BackendError(f"scripted backend: {where}.raw_output must be a string")
    for key in ("sleep_s", "cost_usd"):
        value = entry.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise BackendError(f"scripted backend: {where}.{key} must be a number >= 0, got {value!r}")
    for key in ("exit_code", "tokens_in", "tokens_out"):
        value = entry.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise BackendError(f"scripted backend: {where}.{key} must be an integer, got {value!r}")
    edits = entry.get("edits", [])
    if not isinstance(edits, list):
        raise BackendError(f"scripted backend: {where}.edits must be a list")
    for number, edit in enumerate(edits):
        _edit_check(edit, where=f"{where}.edits[{number}]")


def _edit_check(edit: Any, *, where: str) -> None:
    kinds = [kind for kind in ("replace", "write", "patch") if isinstance(edit, dict) and kind in edit]
    if len(kinds) != 1:
        raise BackendError(f"scripted backend: {where} must hold exactly one of replace, write or patch")
    kind = kinds[0]
    if kind == "patch":
        if not isinstance(edit["patch"], str):
            raise BackendError(f"scripted backend: {where}.patch must be the text of a unified diff")
        return
    path = edit.get("path")
    if not isinstance(path, str) or not path or PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        raise BackendError(f"scripted backend: {where}.path must be a relative path inside the workdir, got {path!r}")
    if kind == "write" and not isinstance(edit["write"], str):
        raise BackendError(f"scripted backend: {where}.write must be the full text of the file")
    if kind == "replace":
        replace = edit["replace"]
        if not (isinstance(replace, dict) and isinstance(replace.get("old"), str) and replace["old"]
                and isinstance(replace.get("new"), str)):
            raise BackendError(f"scripted backend: {where}.replace must be {{\"old\": non-empty text, \"new\": text}}")


def _script_load(config: Mapping[str, Any]) -> dict:
    if "script" in config:
        script = config["script"]
    elif "script_path" in config:
        path = Path(str(config["script_path"])).expanduser()
        if not path.is_absolute():
            from django.conf import settings

            path = Path(settings.BASE_DIR) / path
        try:
            script = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise BackendError(f"scripted backend: cannot read script_path {path}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise BackendError(f"scripted backend: {path} is not valid JSON: {exc}") from exc
    else:
        raise BackendError("scripted backend: config needs 'script' (an object) or 'script_path' (a JSON file)")
    if not isinstance(script, dict) or not isinstance(script.get("entries", []), list):
        raise BackendError("scripted backend: the script must be an object with an 'entries' list")
    unknown = sorted(set(script) - {"entries", "defaults"})
    if unknown:
        raise BackendError(f"scripted backend: the script has unknown key(s) {', '.join(unknown)}")
    for number, entry in enumerate(script.get("entries", [])):
        _entry_check(entry, where=f"entries[{number}]", keyed=True)
    defaults = script.get("defaults", {})
    if not isinstance(defaults, dict):
        raise BackendError("scripted backend: 'defaults' must map role names to entries")
    for role, entry in defaults.items():
        if role not in {r.value for r in Role}:
            raise BackendError(f"scripted backend: defaults.{role} is not a role; use one of {_ROLES}")
        _entry_check(entry, where=f"defaults.{role}", keyed=False)
    return script


class _EditFailed(Exception):
    pass


class ScriptedBackend(CodingBackend):
    name = "scripted"

    def __init__(self, *, config: Mapping[str, Any]):
        super().__init__(config=config)
        self.script = _script_load(config)
        self._cancelled = threading.Event()

    def preflight(self) -> Preflight:
        return Preflight(ok=True, version=f"scripted ({len(self.script.get('entries', []))} entries)")

    def cancel(self) -> None:
        # Sticky: a cancelled backend answers every later request with "cancelled" too.
        self._cancelled.set()

    def entry_find(self, *, role: str, iteration: int, round: int) -> dict | None:
        candidates = [entry for entry in self.script.get("entries", []) if entry["role"] == role]
        for want_iteration, want_round in ((iteration, round), (iteration, ANY), (ANY, round), (ANY, ANY)):
            for entry in candidates:
                if entry.get("iteration", ANY) == want_iteration and entry.get("round", ANY) == want_round:
                    return entry
        return self.script.get("defaults", {}).get(role)

    def run_role(self, request: RoleRequest) -> RoleResult:
        started = time.monotonic()
        log_dir = Path(request.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / "prompts.jsonl", "a", encoding="utf-8") as prompts:
            prompts.write(json.dumps({
                "role": str(request.role), "iteration": request.iteration, "round": request.round,
                "system_prompt": request.system_prompt, "user_input": request.user_input,
            }) + "\n")
        transcript = log_dir / f"{request.role}-i{request.iteration}-r{request.round}.scripted.json"
        entry = self.entry_find(role=str(request.role), iteration=request.iteration, round=request.round)

        def finish(*, exit_code: int, output: dict | None = None, raw: str = "", error: str = "",
                   timed_out: bool = False) -> RoleResult:
            result = RoleResult(
                exit_code=exit_code, timed_out=timed_out, output=output, raw_output=raw, transcript_path=transcript,
                session_id=f"scripted-{request.role}-{request.iteration}-{request.round}",
                tokens_in=(entry or {}).get("tokens_in", 0), tokens_out=(entry or {}).get("tokens_out", 0),
                cost_usd=float((entry or {}).get("cost_usd", 0)), elapsed_s=time.monotonic() - started,
                model="scripted", error=error,
            )
            self._transcript_write(transcript, request=request, entry=entry, result=result)
            return result

        if entry is None:
            return finish(exit_code=1, error=f"no scripted entry for role {request.role}, iteration "
                                             f"{request.iteration}, round {request.round}")
        if entry.get("crash"):
            self._transcript_write(transcript, request=request, entry=entry, result=None)
            raise BackendCrashed(f"scripted backend crashed on purpose ({request.role}, iteration "
                                 f"{request.iteration}, round {request.round})")
        stopped = self._sleep(float(entry.get("sleep_s", 0)), timeout_s=request.timeout_s, started=started)
        if stopped == "timeout":
            return finish(exit_code=EXIT_TIMED_OUT, timed_out=True,
                          error=f"timed out after {request.timeout_s:g} s")
        if stopped == "cancelled":
            return finish(exit_code=EXIT_CANCELLED, error="cancelled")
        if entry.get("violate_readonly"):
            # Regardless of access: catching this is the orchestrator's (or the sandbox's) job.
            (Path(request.workdir) / VIOLATION_FILE).write_text("written by a read-only role\n", encoding="utf-8")
        if request.access == Access.READ_WRITE:
            try:
                self._edits_apply(Path(request.workdir), entry.get("edits", []))
            except _EditFailed as exc:
                return finish(exit_code=1, error=str(exc))
        if "raw_output" in entry:
            raw = entry["raw_output"]
            try:
                parsed = json.loads(raw)
            except json.JSONDecodeError:
                parsed = None
            output = parsed if isinstance(parsed, dict) else None
        else:
            output = entry.get("output")
            raw = json.dumps(output) if output is not None else ""
        exit_code = entry.get("exit_code", 0)
        return finish(exit_code=exit_code, output=output, raw=raw,
                      error=f"scripted exit code {exit_code}" if exit_code else "")

    def _sleep(self, seconds: float, *, timeout_s: float, started: float) -> str:
        while True:
            elapsed = time.monotonic() - started
            if self._cancelled.is_set():
                return "cancelled"
            if elapsed >= seconds:
                return ""
            if elapsed >= timeout_s:
                return "timeout"
            time.sleep(min(SLEEP_STEP_S, seconds - elapsed, timeout_s - elapsed))

    def _edits_apply(self, workdir: Path, edits: list[dict]) -> None:
        from evolution.git import patch_apply

        root = workdir.resolve()
        for number, edit in enumerate(edits):
            if "patch" in edit:
                try:
                    patch_apply(workdir=workdir, patch=edit["patch"])
                except GitError as exc:
                    raise _EditFailed(f"edit {number}: the patch does not apply: {exc.message}") from exc
                continue
            path = (workdir / edit["path"]).resolve()
            if not path.is_relative_to(root):
                raise _EditFailed(f"edit {number}: {edit['path']} leads outside the workdir")
            if "write" in edit:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(edit["write"], encoding="utf-8")
                continue
            # Sandboxed runs wrote to this worktree before: the file is read without following a link.
            written = written_file_read(folder=path.parent, relative=path.name,
                                        owners=owner_limits(max_bytes=SCRIPTED_FILE_MAX_BYTES))
            if written is None or written.data is None:
                reason = written.skipped if written is not None else "No such file or directory"
                raise _EditFailed(f"edit {number}: cannot read {edit['path']}: {reason}")
            text = written.data.decode("utf-8")
            old, new = edit["replace"]["old"], edit["replace"]["new"]
            count = text.count(old)
            if count != 1:
                raise _EditFailed(f"edit {number}: the text to replace occurs {count} times in {edit['path']}; "
                                  "it must occur exactly once")
            path.write_text(text.replace(old, new), encoding="utf-8")

    @staticmethod
    def _transcript_write(path: Path, *, request: RoleRequest, entry: dict | None,
                          result: RoleResult | None) -> None:
        record = {
            "backend": "scripted", "role": str(request.role), "iteration": request.iteration,
            "round": request.round, "access": str(request.access), "workdir": str(request.workdir),
            "system_prompt": request.system_prompt, "user_input": request.user_input, "entry": entry,
            "result": None if result is None else {
                "exit_code": result.exit_code, "timed_out": result.timed_out, "output": result.output,
                "error": result.error,
            },
        }
        path.write_text(json.dumps(record, indent=1), encoding="utf-8")
