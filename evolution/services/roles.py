"""Calling a coding-agent role: its prompt, its output contract (§7.7), validation with one repair, and the
read-only check (tree hash before and after) for the roles that must not edit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from evolution import git
from evolution.backends import Access, BackendCrashed, Role, RoleRequest, RoleResult, backend_get
from evolution.backends.key_env import backend_model_check
from evolution.models import EvolutionJob, StageRun
from evolution.services.workspace import Heartbeat

_STR_LIST = {"type": "array", "items": {"type": "string"}}
_EVIDENCE = {"type": "object", "properties": {"file": {"type": "string"}, "line": {"type": ["integer", "string"]},
                                             "quote": {"type": "string", "maxLength": 400}}}
_CLUSTER = {"type": "object", "required": ["title", "root_cause"], "properties": {
    "id": {"type": ["string", "integer"]}, "title": {"type": "string"}, "task_ids": _STR_LIST,
    "root_cause": {"type": "string"}, "confidence": {"type": ["number", "string"]},
    "evidence": {"type": "array", "items": _EVIDENCE}}}
SCHEMAS: dict[str, dict] = {
    Role.LOCATOR: {
        "type": "object", "required": ["clusters"],
        "properties": {"clusters": {"type": "array", "items": _CLUSTER}, "not_reproduced_task_ids": _STR_LIST,
                       "notes": {"type": "string"}},
    },
    Role.PLANNER: {
        "type": "object", "required": ["changes"],
        "properties": {
            "changes": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["file", "change"],
                                                                  "properties": {"file": {"type": "string"}}}},
            "tests_to_add": {"type": "array"}, "per_task_impact": {"type": "array"}, "risks": {"type": "array"},
            "dependency_changes": {"type": "array"},
        },
    },
    Role.PLAN_REVIEWER: {
        "type": "object", "required": ["verdict"],
        "properties": {"verdict": {"enum": ["APPROVE", "REJECT_ARCHITECTURAL", "REJECT_COMPLETENESS"]},
                       "issues": {"type": "array"}, "sibling_task_impact": {"type": "array"}},
    },
    Role.IMPLEMENTER: {
        "type": "object", "required": ["status"],
        "properties": {"status": {"enum": ["DONE", "BLOCKED"]}, "summary": {"type": "string"},
                       "deviations": {"type": "array"}, "blocker": {"type": ["string", "null"]}},
    },
    Role.CODE_REVIEWER: {
        "type": "object", "required": ["verdict"],
        "properties": {
            "verdict": {"enum": ["APPROVE", "REJECT_IMPL"]},
            "issues": {"type": "array", "items": {"type": "object", "required": ["severity"], "properties": {
                "severity": {"enum": ["critical", "important", "minor"]}}}},
            "mutation_test": {"type": "object"},
        },
    },
}

SYSTEM_PROMPTS = {
    Role.LOCATOR: "You are the Locator. Read the repository and find the root cause of the failing tasks described "
                  "below. Cite file:line evidence. Do not propose fixes and do not edit any file.",
    Role.PLANNER: "You are the Planner. Write a plan that fixes the root cause in the diagnosis: files to change, "
                  "intended behaviour, tests to add, predicted impact per task, risks. Do not edit any file.",
    Role.PLAN_REVIEWER: "You are the Plan Reviewer. Check that the plan addresses every cluster at its root cause, "
                        "does not overfit to task ids or literal phrases, and names real files. Approve unless there "
                        "are serious gaps. Do not edit any file.",
    Role.IMPLEMENTER: "You are the Implementer. Implement the approved plan by editing files in the working tree. "
                      "Do not commit; the orchestrator commits and runs the tests itself.",
    Role.CODE_REVIEWER: "You are the Code Reviewer. Review the diff against the approved plan: root-cause alignment, "
                        "side effects (unbounded loops, retries, missing timeouts are critical), scope, tests. "
                        "Do not edit any file.",
}


@dataclass
class RoleOutcome:
    result: RoleResult
    output: dict | None
    problem: str  # "" when fine; else OUTPUT_MALFORMED / ROLE_VIOLATED_READONLY / BACKEND_FAILED
    detail: str = ""


def data_block(title: str, value) -> str:
    """Trace content and earlier outputs are data for the role, never instructions: delimited and JSON-encoded."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True, default=str)
    return f"<{title}>\n{text}\n</{title}>"


def implementer_rules(config: dict) -> str:
    return (f"You may edit only files matching {config['editable_paths']}. Never edit {config['denied_paths']}, "
            "never delete or weaken tests, add no dependencies and no secrets.")


def role_run(*, job: EvolutionJob, stage_run: StageRun, role: Role, iteration: int, round_: int, user_input: str,
             workdir: Path, extra_ro_dirs: tuple[Path, ...], log_dir: Path) -> RoleOutcome:
    access = Access.READ_WRITE if role == Role.IMPLEMENTER else Access.READ_ONLY
    system_prompt = SYSTEM_PROMPTS[role]
    if role == Role.IMPLEMENTER:
        system_prompt += "\n" + implementer_rules(job.target_config)
    if not job.config_snapshot.get("operator"):
        # Again at each role, in the worker's environment: a job saved before the check or a narrower setting, a
        # provider variable the worker sets, a name that resolves elsewhere now (litellm resolves it once more).
        backend_model_check(backend=job.backend_name, config=job.backend_config)
    backend = backend_get(name=job.backend_name, config=job.backend_config)
    Heartbeat.on_stop(backend.cancel)
    log_dir.mkdir(parents=True, exist_ok=True)
    before = git.worktree_tree_hash(worktree_path=workdir) if access == Access.READ_ONLY else ""
    schema = SCHEMAS[role]

    def call(prompt: str) -> RoleResult:
        return backend.run_role(RoleRequest(
            role=role, iteration=iteration, round=round_, system_prompt=system_prompt, user_input=prompt,
            workdir=workdir, access=access, output_schema=schema,
            timeout_s=job.policy["role_timeouts_s"].get(str(role), 1800.0), log_dir=log_dir,
            extra_ro_dirs=extra_ro_dirs,
        ))

    try:
        result = call(user_input)
    except BackendCrashed as exc:
        return RoleOutcome(result=RoleResult(exit_code=-1, timed_out=False, output=None, raw_output="",
                                             transcript_path=None, error=str(exc)),
                           output=None, problem="BACKEND_FAILED", detail=f"the backend crashed: {exc}")
    problem, detail = "", ""
    if access == Access.READ_ONLY:
        after = git.worktree_tree_hash(worktree_path=workdir)
        stage_run.tree_hash_before, stage_run.tree_hash_after = before, after
        if after != before:
            return RoleOutcome(result=result, output=result.output, problem="ROLE_VIOLATED_READONLY",
                               detail=f"the {role} role changed the working tree ({before[:12]} → {after[:12]})")
    if result.timed_out or result.exit_code != 0:
        return RoleOutcome(result=result, output=None, problem="BACKEND_FAILED",
                           detail=f"{role} {'timed out' if result.timed_out else f'exited {result.exit_code}'}: "
                                  f"{result.error}")
    error = _invalid(result.output, schema)
    if error:  # one repair: the same request with the validation error appended (§7.7)
        result = call(f"{user_input}\n\nYour previous output was invalid: {error}. Reply with JSON matching the "
                      f"schema:\n{json.dumps(schema)}")
        error = _invalid(result.output, schema) if result.exit_code == 0 and not result.timed_out else "no output"
        if error:
            problem, detail = "OUTPUT_MALFORMED", f"{role} output does not match its contract: {error}"
    return RoleOutcome(result=result, output=result.output if not problem else None, problem=problem, detail=detail)


def _invalid(output, schema) -> str:
    if output is None:
        return "no JSON object in the output"
    try:
        jsonschema.validate(output, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        return f"{where}: {exc.message}"
    return ""


def code_review_decision(output: dict) -> tuple[str, list[dict]]:
    """Any critical or important issue rejects, whatever the verdict field says; minor issues are advisory."""
    blocking = [i for i in output.get("issues", []) if i.get("severity") in ("critical", "important")]
    if blocking or output.get("verdict") != "APPROVE":
        return "REJECT", blocking or [{"severity": "important", "detail": "the reviewer rejected the change"}]
    return "APPROVE", []
