"""The `hot_swap` section of a target's config: which activator, which probes, the health window, retention.

The models are pydantic so the target config can nest `HotSwapConfig` and report bad fields as
`hot_swap.activator.unit: ...`; `build()` turns a validated section into the objects hot_swap_promote takes.

    "hot_swap": {
      "activator": {"kind": "process", "command": "python -m support_desk serve"},
      "preflight_commands": ["python -c 'import support_desk'"],
      "probes": [{"kind": "command", "command": "python -m support_desk health"}, {"kind": "process_alive"}],
      "health": {"interval_s": 5, "window_s": 90, "passes_required": 3},
      "keep_releases": 5,
      "network": "none"
    }

Built with a confinement (what every hot-swap job's plan gets, evolution/services/hot_swap.py), the process
activator's agent, the preflight commands and the command probes run in the sandbox (evolution/sandbox/live.py): as
the sandbox user, with the activator's `env` plus PATH, HOME and LANG, without network unless `network` is "host",
and able to write only in the directories of their heartbeat probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evolution.deploy.activators import Activator, KubernetesActivator, ProcessActivator, SystemdActivator
from evolution.deploy.commands import (
    CommandRunner, command_argv, confined_command_runner, subprocess_command_runner,
)
from evolution.deploy.errors import DeployInvalid
from evolution.deploy.health import (
    CommandProbe,
    HeartbeatFileProbe,
    HttpProbe,
    Probe,
    ProcessAliveProbe,
    health_params_validate,
)


def _command(value: str) -> str:
    try:
        command_argv(value, release_dir="")
    except DeployInvalid as exc:
        raise ValueError(exc.message) from exc
    return value


def _word(value: str, example: str) -> str:
    if not value or any(ch.isspace() for ch in value):
        raise ValueError(f"must be one word without spaces, such as {example!r}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProcessActivatorConfig(_Strict):
    kind: Literal["process"]
    command: str
    env: dict[str, str] = Field(default_factory=dict)
    stop_timeout_s: float = Field(5.0, gt=0, le=300)

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: str) -> str:
        return _command(value)


class SystemdActivatorConfig(_Strict):
    kind: Literal["systemd"]
    unit: str
    user: bool = False
    timeout_s: float = Field(90.0, gt=0, le=3600)

    @field_validator("unit")
    @classmethod
    def _unit(cls, value: str) -> str:
        return _word(value, "support-desk.service")


class KubernetesActivatorConfig(_Strict):
    kind: Literal["kubernetes"]
    deployment: str
    container: str
    image: str = Field(description="image template, e.g. registry.example/agent:{release_id}")
    namespace: str | None = None
    context: str | None = None
    rollout_timeout_s: float = Field(600.0, gt=0, le=7200)

    @field_validator("deployment", "container")
    @classmethod
    def _names(cls, value: str) -> str:
        return _word(value, "support-desk")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        _word(value, "registry.example/agent:{release_id}")
        if "{release_id}" not in value:
            raise ValueError("must contain {release_id} so each release has its own image, "
                             "e.g. 'registry.example/agent:{release_id}'")
        return value


class CommandProbeConfig(_Strict):
    kind: Literal["command"]
    command: str
    timeout_s: float = Field(10.0, gt=0, le=600)

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: str) -> str:
        return _command(value)


class HttpProbeConfig(_Strict):
    kind: Literal["http"]
    url: str
    timeout_s: float = Field(5.0, gt=0, le=600)
    expect_status: int = Field(200, ge=100, le=599)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https:// (e.g. 'http://127.0.0.1:8080/health')")
        return _word(value, "http://127.0.0.1:8080/health")


class ProcessAliveProbeConfig(_Strict):
    kind: Literal["process_alive"]


class HeartbeatProbeConfig(_Strict):
    kind: Literal["heartbeat"]
    path: str = Field(min_length=1, description="absolute, or relative to the releases root (shared state)")
    max_age_s: float = Field(30.0, gt=0, le=86400)


# What a releases root holds besides the heartbeat directories (evolution/deploy/README.md): never writable by the
# live release.
ROOT_ENTRIES = ("releases", "current", "state.json", ".lock", "agent.pid", "agent.log")


def _heartbeat_dir_problem(path: str) -> str:
    parts = Path(path).parts
    if Path(path).is_absolute():
        return ("must be relative to the releases root when the activator is a process: the live release writes "
                "its heartbeat there and nowhere else")
    if ".." in parts:
        return "must stay inside the releases root (no '..')"
    if len(parts) < 2:
        return (f"give the heartbeat a directory of its own, e.g. 'heartbeat/{path}': the live release may write "
                "in that directory and nowhere else outside its release")
    if parts[0] in ROOT_ENTRIES or parts[0].startswith("."):
        return f"{parts[0]!r} belongs to the releases root; choose another directory, e.g. 'heartbeat/beat'"
    return ""


ActivatorConfig = Annotated[
    ProcessActivatorConfig | SystemdActivatorConfig | KubernetesActivatorConfig, Field(discriminator="kind")
]
ProbeConfig = Annotated[
    CommandProbeConfig | HttpProbeConfig | ProcessAliveProbeConfig | HeartbeatProbeConfig,
    Field(discriminator="kind"),
]


class HealthConfig(_Strict):
    interval_s: float = Field(5.0, gt=0)
    window_s: float = Field(90.0, gt=0)
    # Bounded so the fit check below is float arithmetic on sane numbers (400 digits overflowed it into a 500).
    passes_required: int = Field(3, ge=1, le=10_000)

    @model_validator(mode="after")
    def _fits(self) -> HealthConfig:
        try:
            health_params_validate(interval_s=self.interval_s, window_s=self.window_s,
                                   passes_required=self.passes_required)
        except DeployInvalid as exc:
            raise ValueError(exc.message) from exc
        return self


@dataclass(frozen=True)
class HotSwapPlan:
    """Everything hot_swap_promote needs besides the release: `hot_swap_promote(..., **plan.promote_kwargs())`."""

    activator: Activator
    probes: tuple[Probe, ...]
    preflight_commands: tuple[str, ...]
    preflight_timeout_s: float
    interval_s: float
    window_s: float
    passes_required: int
    keep_releases: int
    preflight_runner: CommandRunner = subprocess_command_runner

    def health_kwargs(self) -> dict[str, Any]:
        """For hot_swap_recover / hot_swap_rollback."""
        return {"activator": self.activator, "probes": self.probes, "interval_s": self.interval_s,
                "window_s": self.window_s, "passes_required": self.passes_required}

    def promote_kwargs(self) -> dict[str, Any]:
        return {**self.health_kwargs(), "preflight_commands": self.preflight_commands,
                "preflight_runner": self.preflight_runner, "preflight_timeout_s": self.preflight_timeout_s,
                "keep_releases": self.keep_releases}


class HotSwapConfig(_Strict):
    activator: ActivatorConfig
    probes: list[ProbeConfig] = Field(default_factory=list)
    preflight_commands: list[str] = Field(default_factory=list)
    preflight_timeout_s: float = Field(120.0, gt=0, le=3600)
    health: HealthConfig = Field(default_factory=HealthConfig)
    keep_releases: int = Field(5, ge=1, le=1000)
    # "host": the live release shares the worker host's network, its loopback services (Redis, Postgres) included.
    network: Literal["none", "host"] = "none"

    @field_validator("preflight_commands")
    @classmethod
    def _commands(cls, value: list[str]) -> list[str]:
        return [_command(command) for command in value]

    @model_validator(mode="after")
    def _heartbeats_writable(self) -> HotSwapConfig:
        if isinstance(self.activator, ProcessActivatorConfig):
            for index, probe in enumerate(self.probes):
                problem = _heartbeat_dir_problem(probe.path) if isinstance(probe, HeartbeatProbeConfig) else ""
                if problem:
                    raise ValueError(f"probes.{index}.path: {problem}")
        return self

    @property
    def env(self) -> dict[str, str]:
        """The variables the live release's processes get besides PATH, HOME and LANG."""
        return dict(self.activator.env) if isinstance(self.activator, ProcessActivatorConfig) else {}

    def writable_dirs(self, releases_root: Path | str) -> list[Path]:
        """The heartbeat directories a process activator's agent may write (nothing else outside its release)."""
        if not isinstance(self.activator, ProcessActivatorConfig):
            return []
        root = Path(releases_root).absolute()
        return [(root / probe.path).parent for probe in self.probes if isinstance(probe, HeartbeatProbeConfig)]

    def build(
        self,
        *,
        releases_root: Path | str,
        health_command: str = "",
        runner: CommandRunner = subprocess_command_runner,
        confinement: Any = None,
    ) -> HotSwapPlan:
        """Activator and probes for one release root. Without explicit probes: the target's health command (when it
        has one) plus the activator's liveness. A process activator keeps its pid file and log in the root.

        With `confinement` (evolution/sandbox/live.py) the agent, the preflight commands and the command probes
        run in the sandbox; systemctl and kubectl (the activator's own `runner`) stay the operator's, on the host."""
        root = Path(releases_root).absolute()
        activator = self._activator(root, runner, confinement)
        command_runner = confined_command_runner(confinement) if confinement is not None else runner
        probes = self._probes(root, activator, health_command, command_runner)
        return HotSwapPlan(
            activator=activator, probes=probes, preflight_commands=tuple(self.preflight_commands),
            preflight_timeout_s=self.preflight_timeout_s, interval_s=self.health.interval_s,
            window_s=self.health.window_s, passes_required=self.health.passes_required,
            keep_releases=self.keep_releases,
            preflight_runner=command_runner if confinement is not None else subprocess_command_runner,
        )

    def _activator(self, root: Path, runner: CommandRunner, confinement: Any) -> Activator:
        config = self.activator
        if isinstance(config, ProcessActivatorConfig):
            return ProcessActivator(command=config.command, env=config.env, log_path=root / "agent.log",
                                    pid_file=root / "agent.pid", stop_timeout_s=config.stop_timeout_s,
                                    confinement=confinement)
        if isinstance(config, SystemdActivatorConfig):
            return SystemdActivator(unit=config.unit, user=config.user, timeout_s=config.timeout_s, runner=runner)
        return KubernetesActivator(deployment=config.deployment, container=config.container, image=config.image,
                                   namespace=config.namespace, context=config.context, runner=runner,
                                   rollout_timeout_s=config.rollout_timeout_s)

    def _probes(
        self, root: Path, activator: Activator, health_command: str, runner: CommandRunner
    ) -> tuple[Probe, ...]:
        configs: Sequence[Any] = self.probes
        if not configs:
            defaults: list[Any] = [ProcessAliveProbeConfig(kind="process_alive")]
            if health_command:
                defaults.insert(0, CommandProbeConfig(kind="command", command=health_command))
            configs = defaults
        probes: list[Probe] = []
        for config in configs:
            if isinstance(config, CommandProbeConfig):
                probes.append(CommandProbe(command=config.command, cwd=root / "current", timeout_s=config.timeout_s,
                                           runner=runner))
            elif isinstance(config, HttpProbeConfig):
                probes.append(HttpProbe(url=config.url, timeout_s=config.timeout_s,
                                        expect_status=config.expect_status))
            elif isinstance(config, ProcessAliveProbeConfig):
                probes.append(ProcessAliveProbe(target=activator))
            else:
                probes.append(HeartbeatFileProbe(path=root / config.path, max_age_s=config.max_age_s))
        return tuple(probes)


def hot_swap_config_validate(data: Any) -> HotSwapConfig:
    """A `hot_swap` section on its own (the target config may instead nest HotSwapConfig and report its errors)."""
    if not isinstance(data, dict):
        raise DeployInvalid("The hot_swap config must be a JSON object with at least an 'activator'.")
    try:
        return HotSwapConfig.model_validate(data)
    except ValidationError as exc:
        problems = {}
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "hot_swap"
            problems[f"hot_swap.{where}"] = error["msg"].removeprefix("Value error, ")
        text = "; ".join(f"{where}: {message}" for where, message in problems.items())
        raise DeployInvalid(f"Invalid hot_swap config: {text}", extra={"fields": problems}) from exc
