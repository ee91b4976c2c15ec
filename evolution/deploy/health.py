"""Health probes and the probe window (MOSS defaults: every 5 s for up to 90 s, 3 passes in a row = healthy).

Probes return a ProbeResult and never raise: a probe that crashes counts as a failed probe, so a bug in a probe can
only cause a rollback, never a half-finished promotion.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evolution.deploy.commands import CommandRunner, command_argv, subprocess_command_runner
from evolution.deploy.errors import DeployInvalid
from evolution.deploy.state import utc_now


@dataclass(frozen=True)
class ProbeResult:
    name: str
    ok: bool
    detail: str = ""
    at: str = ""
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProbeReport:
    """One pass over a list of checks (the preflight commands, or one round of health probes)."""

    ok: bool
    results: tuple[ProbeResult, ...] = ()

    @property
    def failures(self) -> tuple[ProbeResult, ...]:
        return tuple(result for result in self.results if not result.ok)

    def summary(self) -> str:
        failed = self.failures
        if not failed:
            return "all passed"
        return "; ".join(f"{result.name}: {result.detail}" for result in failed)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "results": [result.to_dict() for result in self.results]}


class Probe(Protocol):
    name: str

    def check(self) -> ProbeResult: ...


class AliveTarget(Protocol):
    def alive(self) -> bool: ...


def _timed(name: str, check: Callable[[], tuple[bool, str]]) -> ProbeResult:
    at = utc_now()
    started = time.monotonic()
    try:
        ok, detail = check()
    except Exception as exc:  # a probe's own bug is a failed probe, reported, never a crash of the promotion
        ok, detail = False, f"probe raised {type(exc).__name__}: {exc}"
    return ProbeResult(name=name, ok=ok, detail=detail, at=at, duration_s=round(time.monotonic() - started, 4))


def _positive(value: float, what: str) -> float:
    if not isinstance(value, int | float) or value <= 0:
        raise DeployInvalid(f"{what} must be a positive number of seconds, got {value!r}.")
    return float(value)


@dataclass
class CommandProbe:
    """The health command exits 0 within `timeout_s` (run from `cwd`, usually `<releases_root>/current`)."""

    command: str | Sequence[str]
    cwd: Path | None = None
    timeout_s: float = 10.0
    env: Mapping[str, str] | None = None
    runner: CommandRunner = subprocess_command_runner
    name: str = ""

    def __post_init__(self) -> None:
        self.argv = command_argv(self.command)
        self.timeout_s = _positive(self.timeout_s, "CommandProbe timeout_s")
        self.name = self.name or f"command: {' '.join(self.argv)}"

    def check(self) -> ProbeResult:
        def run() -> tuple[bool, str]:
            outcome = self.runner(self.argv, cwd=self.cwd, timeout_s=self.timeout_s, env=self.env)
            return outcome.ok, outcome.summary()

        return _timed(self.name, run)


@dataclass
class HttpProbe:
    """GET `url` answers `expect_status` (200) within `timeout_s`; redirects are not followed."""

    url: str
    timeout_s: float = 5.0
    expect_status: int = 200
    name: str = ""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise DeployInvalid(f"HttpProbe url {self.url!r} must start with http:// or https://.")
        self.timeout_s = _positive(self.timeout_s, "HttpProbe timeout_s")
        self.name = self.name or f"http: {self.url}"

    def check(self) -> ProbeResult:
        def get() -> tuple[bool, str]:
            opener = urllib.request.build_opener(_NoRedirect)
            try:
                with opener.open(urllib.request.Request(self.url, method="GET"), timeout=self.timeout_s) as response:
                    status = response.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                return False, f"GET {self.url} failed: {reason}"
            return status == self.expect_status, f"HTTP {status}"

        return _timed(self.name, get)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class ProcessAliveProbe:
    """The activator's process (or unit, or rollout) is running."""

    target: AliveTarget
    name: str = "process alive"

    def check(self) -> ProbeResult:
        return _timed(self.name, lambda: (True, "running") if self.target.alive() else (False, "not running"))


@dataclass
class HeartbeatFileProbe:
    """The agent touched `path` at most `max_age_s` ago (its own liveness signal, independent of our process view)."""

    path: Path
    max_age_s: float = 30.0
    now: Callable[[], float] = time.time
    name: str = ""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.max_age_s = _positive(self.max_age_s, "HeartbeatFileProbe max_age_s")
        self.name = self.name or f"heartbeat: {self.path}"

    def check(self) -> ProbeResult:
        def fresh() -> tuple[bool, str]:
            try:
                # lstat: a link the agent planted there says nothing about the agent.
                age = self.now() - os.lstat(self.path).st_mtime
            except FileNotFoundError:
                return False, f"{self.path} does not exist"
            return age <= self.max_age_s, f"{age:.1f}s old (limit {self.max_age_s:g}s)"

        return _timed(self.name, fresh)


def _check(probe: Probe) -> ProbeResult:
    try:
        return probe.check()
    except Exception as exc:  # a probe written elsewhere may raise; that is a failed probe too
        name = getattr(probe, "name", "") or type(probe).__name__
        return ProbeResult(name=name, ok=False, detail=f"probe raised {type(exc).__name__}: {exc}", at=utc_now())


def probes_run(probes: Sequence[Probe]) -> ProbeReport:
    results = tuple(_check(probe) for probe in probes)
    return ProbeReport(ok=all(result.ok for result in results), results=results)


@dataclass(frozen=True)
class HealthRound:
    offset_s: float  # since the window opened, on the injected clock
    report: ProbeReport

    def to_dict(self) -> dict[str, Any]:
        return {"offset_s": round(self.offset_s, 3), **self.report.to_dict()}


@dataclass(frozen=True)
class HealthReport:
    healthy: bool
    reason: str  # "healthy" | "window_exhausted" | "cancelled"
    streak: int
    passes_required: int
    window_s: float
    interval_s: float
    rounds: tuple[HealthRound, ...] = field(default=())

    @property
    def results(self) -> tuple[ProbeResult, ...]:
        return tuple(result for round_ in self.rounds for result in round_.report.results)

    def summary(self) -> str:
        if self.healthy:
            return f"{self.streak} passes in a row after {len(self.rounds)} rounds"
        last_failure = next((r.report for r in reversed(self.rounds) if not r.report.ok), None)
        detail = f"; last failure: {last_failure.summary()}" if last_failure else ""
        if self.reason == "cancelled":
            return f"cancelled after {len(self.rounds)} rounds{detail}"
        return (
            f"no {self.passes_required} passes in a row within {self.window_s:g}s "
            f"({len(self.rounds)} rounds){detail}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy, "reason": self.reason, "streak": self.streak,
            "passes_required": self.passes_required, "window_s": self.window_s, "interval_s": self.interval_s,
            "summary": self.summary(), "rounds": [round_.to_dict() for round_ in self.rounds],
        }


def health_params_validate(*, interval_s: float, window_s: float, passes_required: int) -> None:
    _positive(interval_s, "Health interval_s")
    _positive(window_s, "Health window_s")
    if not isinstance(passes_required, int) or passes_required < 1:
        raise DeployInvalid(f"Health passes_required must be a whole number ≥ 1, got {passes_required!r}.")
    if (passes_required - 1) * interval_s > window_s:
        raise DeployInvalid(
            f"{passes_required} passes every {interval_s:g}s cannot fit in a {window_s:g}s window; "
            "lengthen window_s or lower passes_required."
        )


def health_watch(
    *,
    probes: Sequence[Probe],
    interval_s: float = 5.0,
    window_s: float = 90.0,
    passes_required: int = 3,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    should_stop: Callable[[], bool] | None = None,
) -> HealthReport:
    """Probe every `interval_s` until `passes_required` consecutive all-pass rounds, or until the next round would
    start after `window_s`. A failed round resets the streak."""
    if not probes:
        raise DeployInvalid("health_watch needs at least one probe (a health command, URL, process or heartbeat).")
    health_params_validate(interval_s=interval_s, window_s=window_s, passes_required=passes_required)
    rounds: list[HealthRound] = []
    streak = 0
    started = clock()

    def report(healthy: bool, reason: str) -> HealthReport:
        return HealthReport(
            healthy=healthy, reason=reason, streak=streak, passes_required=passes_required, window_s=window_s,
            interval_s=interval_s, rounds=tuple(rounds),
        )

    index = 0
    while True:
        if should_stop is not None and should_stop():
            return report(False, "cancelled")
        round_report = probes_run(probes)
        rounds.append(HealthRound(offset_s=clock() - started, report=round_report))
        streak = streak + 1 if round_report.ok else 0
        if streak >= passes_required:
            return report(True, "healthy")
        # Rounds sit on a fixed grid from the start (a slow round skips grid points rather than shifting the grid),
        # so slow probes neither stretch the window nor cause back-to-back rounds.
        index = max(index + 1, int((clock() - started) // interval_s) + 1)
        next_at = started + index * interval_s
        if next_at - started > window_s:
            return report(False, "window_exhausted")
        delay = next_at - clock()
        if delay > 0:
            sleep(delay)
