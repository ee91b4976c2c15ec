"""A target's evolution configuration (evolution.json) and a job's policy, validated with every bad field named."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evolution.deploy.config import HotSwapConfig
from evolution.errors import EvolutionConfigInvalid

LEVELS = ("subprocess", "bwrap", "docker")
PLACEHOLDERS = {
    "trial_command": {"task_id", "seed", "out"},
    "grader_command": {"task_id", "seed", "out"},
    "install_command": set(),
    "test_command": set(),
    "health_command": set(),
    "suite_command": set(),
}
REQUIRED_PLACEHOLDERS = {"trial_command": {"task_id", "out"}, "grader_command": {"out"}}


class DiffBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_files: int = Field(10, ge=1)
    max_lines: int = Field(400, ge=1)


class TargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    editable_paths: list[str] = Field(min_length=1)
    denied_paths: list[str] = Field(default_factory=list)
    install_command: str = ""
    test_command: str = ""
    trial_command: str
    grader_command: str
    health_command: str = ""
    suite_command: str = ""
    diff_budget: DiffBudget = Field(default_factory=DiffBudget)
    sandbox_levels: list[str] = Field(default_factory=lambda: ["bwrap", "subprocess"], min_length=1)
    trial_timeout_s: float = Field(120.0, gt=0, le=3600)
    trials: int | None = Field(None, ge=1, le=20)
    allow_dependency_changes: bool = False
    hot_swap: HotSwapConfig | None = None  # how an approved candidate is released in hot-swap mode (evolution/deploy)
    # Scripts of the scripted backend written for this target, offered on the Evolve form (the first is chosen):
    # paths as the backend's script_path takes them, relative to Clear's root or absolute.
    scripted_fixtures: list[str] | None = None

    @field_validator("editable_paths", "denied_paths")
    @classmethod
    def _globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern.strip() or pattern.startswith("/") or ".." in Path(pattern).parts:
                raise ValueError(f"{pattern!r} must be a relative glob inside the repository (e.g. 'pkg/**')")
        return value

    @field_validator("sandbox_levels")
    @classmethod
    def _levels(cls, value: list[str]) -> list[str]:
        unknown = [level for level in value if level not in LEVELS]
        if unknown:
            raise ValueError(f"unknown level(s) {unknown}; use {', '.join(LEVELS)}")
        return value

    @field_validator(*PLACEHOLDERS)
    @classmethod
    def _command(cls, template: str, info) -> str:
        if not template:
            return template
        allowed = PLACEHOLDERS[info.field_name]
        try:
            used = _placeholders(template)
            shlex.split(template)
        except ValueError as exc:
            raise ValueError(f"cannot parse the command: {exc}") from exc
        if used - allowed:
            raise ValueError(f"unknown placeholder(s) {sorted(used - allowed)}; allowed: {sorted(allowed) or 'none'}")
        missing = REQUIRED_PLACEHOLDERS.get(info.field_name, set()) - used
        if missing:
            raise ValueError(f"must contain {', '.join('{' + m + '}' for m in sorted(missing))}")
        return template


def _placeholders(template: str) -> set[str]:
    import string

    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def command_render(template: str, **values: Any) -> list[str]:
    """A command's argv: split first, then substitute into each word, so no value can add or split arguments."""
    return [word.format(**{k: str(v) for k, v in values.items()}) for word in shlex.split(template)]


def _error_text(exc: ValidationError) -> tuple[str, dict[str, str]]:
    fields = {}
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(config)"
        message = error["msg"].removeprefix("Value error, ")
        fields[where] = f"{fields[where]}; {message}" if where in fields else message
    return "; ".join(f"{k}: {v}" for k, v in fields.items()), fields


def target_config_validate(config: Any) -> TargetConfig:
    if not isinstance(config, dict):
        raise EvolutionConfigInvalid("The evolution config must be a JSON object", extra={"fields": {}})
    try:
        return TargetConfig.model_validate(config)
    except ValidationError as exc:
        text, fields = _error_text(exc)
        raise EvolutionConfigInvalid(f"Invalid evolution config: {text}", extra={"fields": fields}) from exc


# --- job policy: depth tiers of evolution.md §7.15 and the verdict thresholds of §7.10 --------------------------------

DEPTHS = {
    "shallow": {"max_iterations": 2, "plan_rounds": 1, "code_rounds": 1, "trials": 2, "plateau_iters": 1},
    "standard": {"max_iterations": 3, "plan_rounds": 2, "code_rounds": 2, "trials": 3, "plateau_iters": 2},
    "deep": {"max_iterations": 5, "plan_rounds": 3, "code_rounds": 3, "trials": 5, "plateau_iters": 2},
}


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_iterations: int = Field(ge=1, le=20)
    plan_rounds: int = Field(ge=1, le=10)
    code_rounds: int = Field(ge=1, le=10, description="implement attempts per iteration (1 + code retries)")
    trials: int = Field(ge=1, le=20)
    plateau_iters: int = Field(ge=1, le=20)
    min_target_delta: float = Field(0.15, ge=0, le=1)
    min_fixed_fraction: float = Field(0.5, ge=0, le=1)
    regression_tolerance: int = Field(1, ge=0, description="passes a task may lose unless it was pass^n at baseline")
    max_regression_drop: float = Field(0.02, ge=0, le=1)
    end_on_regression: bool = True
    role_timeouts_s: dict[str, float] = Field(default_factory=lambda: {
        "locator": 1200.0, "planner": 1200.0, "plan_reviewer": 900.0, "implementer": 2700.0, "code_reviewer": 900.0,
    })
    check_timeout_s: float = Field(900.0, gt=0)


def job_policy_build(*, depth: str, target_config: TargetConfig, overrides: dict | None = None) -> dict:
    if depth not in DEPTHS:
        raise EvolutionConfigInvalid(f"depth: {depth!r} is not one of {', '.join(DEPTHS)}",
                                     extra={"fields": {"depth": "unknown"}})
    values: dict[str, Any] = dict(DEPTHS[depth])
    if target_config.trials:
        values["trials"] = target_config.trials
    values.update(overrides or {})
    try:
        return Policy.model_validate(values).model_dump()
    except ValidationError as exc:
        text, fields = _error_text(exc)
        raise EvolutionConfigInvalid(f"Invalid job policy: {text}", extra={"fields": fields}) from exc


def evolution_dir() -> Path:
    return Path(settings.CLEAR_EVOLUTION_DIR)
