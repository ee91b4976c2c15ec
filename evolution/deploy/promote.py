"""Hot-swap promotion (evolution.md §7.11): stage → preflight → remember last-good → swap → reload → probe window →
on failure swap back to last-good, reload and probe again.

The functions here return a PromotionResult for every deploy-time outcome and raise only for caller mistakes
(DeployInvalid, ReleaseNotFound, DeployBusy), so the job's state machine maps `outcome` straight onto
PROMOTED / ROLLED_BACK / FAILED and stores `to_dict()` as the stage artifact.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evolution.deploy.activators import Activator
from evolution.deploy.commands import CommandRunner, subprocess_command_runner
from evolution.deploy.errors import ActivatorError, DeployError, DeployInvalid, StageFailed
from evolution.deploy.health import HealthReport, Probe, ProbeReport, health_params_validate, health_watch
from evolution.deploy.releases import (
    release_gc,
    release_mark_healthy,
    release_mark_status,
    release_preflight,
    release_promotion_begin,
    release_promotion_end,
    release_rollback,
    release_stage,
    release_swap,
)
from evolution.deploy.state import SwapRecord, current_release_id, release_layout, release_lock, state_load

logger = logging.getLogger(__name__)


class PromotionOutcome(enum.StrEnum):
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class PromotionReason(enum.StrEnum):
    HEALTHY = "healthy"
    STAGE_FAILED = "stage_failed"
    PREFLIGHT_FAILED = "preflight_failed"
    RELOAD_FAILED = "reload_failed"
    HEALTH_FAILED = "health_failed"
    CANCELLED = "cancelled"
    ROLLBACK_UNHEALTHY = "rollback_unhealthy"
    NO_ROLLBACK_TARGET = "no_rollback_target"
    RECOVERED = "recovered"  # hot_swap_recover rolled back a promotion whose promoter died
    MANUAL = "manual"  # hot_swap_rollback on request


@dataclass(frozen=True)
class HealthPolicy:
    interval_s: float = 5.0
    window_s: float = 90.0
    passes_required: int = 3
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        health_params_validate(interval_s=self.interval_s, window_s=self.window_s,
                               passes_required=self.passes_required)

    def watch(self, probes: Sequence[Probe], *, should_stop: Callable[[], bool] | None = None) -> HealthReport:
        return health_watch(probes=probes, interval_s=self.interval_s, window_s=self.window_s,
                            passes_required=self.passes_required, sleep=self.sleep, clock=self.clock,
                            should_stop=should_stop)


@dataclass(frozen=True)
class PromotionResult:
    outcome: PromotionOutcome
    reason: PromotionReason
    detail: str
    release_id: str
    rollback_to: str | None = None
    active_release: str | None = None  # what `current` points at when the promotion ended
    preflight: ProbeReport | None = None
    health: HealthReport | None = None
    rollback_health: HealthReport | None = None
    swaps: tuple[SwapRecord, ...] = ()
    removed_releases: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": str(self.outcome), "reason": str(self.reason), "detail": self.detail,
            "release_id": self.release_id, "rollback_to": self.rollback_to, "active_release": self.active_release,
            "preflight": self.preflight.to_dict() if self.preflight else None,
            "health": self.health.to_dict() if self.health else None,
            "rollback_health": self.rollback_health.to_dict() if self.rollback_health else None,
            "swaps": [swap.to_dict() for swap in self.swaps], "removed_releases": list(self.removed_releases),
        }


def _reload_and_watch(
    *, activator: Activator, release_dir: Path, probes: Sequence[Probe], policy: HealthPolicy,
    should_stop: Callable[[], bool] | None,
) -> tuple[HealthReport | None, str]:
    """(health report, "") after a reload, or (None, why) when the activator could not reload."""
    try:
        activator.reload(release_dir=release_dir)
    except ActivatorError as exc:
        return None, exc.message
    return policy.watch(probes, should_stop=should_stop), ""


def _restore(
    *, releases_root: Path, to_release: str, reason: str, kind_reason: PromotionReason, release_id: str,
    activator: Activator, probes: Sequence[Probe], policy: HealthPolicy, swaps: list[SwapRecord],
    **result_fields: Any,
) -> PromotionResult:
    """Swap to `to_release`, reload, re-probe (never cancelled: a half-done rollback is worse than a slow one)."""
    if kind_reason is PromotionReason.MANUAL:
        swaps.append(release_swap(releases_root=releases_root, release_id=to_release, reason=reason, kind="manual"))
    else:
        swaps.append(release_rollback(releases_root=releases_root, to_release=to_release, reason=reason))
    layout = release_layout(releases_root)
    health, reload_error = _reload_and_watch(
        activator=activator, release_dir=layout.release_dir(to_release), probes=probes, policy=policy,
        should_stop=None,
    )
    common = dict(release_id=release_id, rollback_to=to_release, active_release=to_release,
                  swaps=tuple(swaps), rollback_health=health, **result_fields)
    if health is not None and health.healthy:
        release_mark_healthy(releases_root=releases_root, release_id=to_release)
        release_promotion_end(releases_root=releases_root)
        return PromotionResult(outcome=PromotionOutcome.ROLLED_BACK, reason=kind_reason,
                               detail=f"{reason}; back on {to_release}, which is healthy again", **common)
    release_mark_status(releases_root=releases_root, release_id=to_release, status="unhealthy")
    release_promotion_end(releases_root=releases_root)
    why = f"reload failed: {reload_error}" if health is None else health.summary()
    return PromotionResult(
        outcome=PromotionOutcome.FAILED, reason=PromotionReason.ROLLBACK_UNHEALTHY,
        detail=f"{reason}; rolled back to {to_release}, but it is unhealthy too ({why}). The agent needs a person.",
        **common,
    )


def _gc(releases_root: Path, keep: int) -> tuple[str, ...]:
    try:
        return tuple(release_gc(releases_root=releases_root, keep=keep))
    except OSError as exc:  # a full disk or a busy directory must not turn a good promotion into a failure
        logger.warning("Release GC in %s failed: %s", releases_root, exc)
        return ()


def hot_swap_promote(
    *,
    releases_root: Path | str,
    release_id: str,
    activator: Activator,
    probes: Sequence[Probe],
    source_dir: Path | str | None = None,
    repo_path: Path | str | None = None,
    commit: str | None = None,
    preflight_commands: Sequence[str | Sequence[str]] = (),
    preflight_runner: CommandRunner = subprocess_command_runner,
    preflight_timeout_s: float = 120.0,
    preflight_env: Mapping[str, str] | None = None,
    interval_s: float = 5.0,
    window_s: float = 90.0,
    passes_required: int = 3,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    should_stop: Callable[[], bool] | None = None,
    keep_releases: int = 5,
    reason: str = "",
    lock_timeout_s: float = 0.0,
) -> PromotionResult:
    """Promote one release; with no source given, `release_id` must already be staged.

    Probes run against whatever `current` points at (give CommandProbe cwd=<releases_root>/current), so the same
    probes check the new release and, after a rollback, the old one. `should_stop` cancels the first probe window
    only; a cancelled promotion is rolled back.
    """
    if not probes:
        raise DeployInvalid("hot_swap_promote needs at least one health probe.")
    if not isinstance(keep_releases, int) or keep_releases < 1:
        raise DeployInvalid(f"keep_releases must be a whole number ≥ 1, got {keep_releases!r}.")
    policy = HealthPolicy(interval_s=interval_s, window_s=window_s, passes_required=passes_required, sleep=sleep,
                          clock=clock)
    layout = release_layout(releases_root)
    root = layout.root
    with release_lock(root, timeout_s=lock_timeout_s):
        release_dir = layout.release_dir(release_id)
        if source_dir is not None or repo_path is not None:
            try:
                release_stage(releases_root=root, release_id=release_id, source_dir=source_dir,
                              repo_path=repo_path, commit=commit)
            except StageFailed as exc:
                return PromotionResult(outcome=PromotionOutcome.FAILED, reason=PromotionReason.STAGE_FAILED,
                                       detail=exc.message, release_id=release_id,
                                       active_release=current_release_id(layout))
        elif not release_dir.is_dir():
            raise DeployInvalid(f"Release {release_id} is not staged in {layout.releases_dir}; pass source_dir or "
                                "repo_path + commit to stage it.")

        preflight = release_preflight(release_dir=release_dir, commands=preflight_commands, runner=preflight_runner,
                                      timeout_s=preflight_timeout_s, env=preflight_env)
        if not preflight.ok:
            release_mark_status(releases_root=root, release_id=release_id, status="preflight_failed")
            return PromotionResult(
                outcome=PromotionOutcome.FAILED, reason=PromotionReason.PREFLIGHT_FAILED,
                detail=f"preflight failed, nothing swapped: {preflight.summary()}", release_id=release_id,
                active_release=current_release_id(layout), preflight=preflight, removed_releases=_gc(root,
                                                                                                    keep_releases),
            )

        pending = release_promotion_begin(releases_root=root, release_id=release_id, reason=reason)
        swaps = [release_swap(releases_root=root, release_id=release_id, reason=reason or f"promote {release_id}")]
        health, reload_error = _reload_and_watch(activator=activator, release_dir=release_dir, probes=probes,
                                                 policy=policy, should_stop=should_stop)
        if health is not None and health.healthy:
            release_mark_healthy(releases_root=root, release_id=release_id)
            return PromotionResult(
                outcome=PromotionOutcome.PROMOTED, reason=PromotionReason.HEALTHY, detail=health.summary(),
                release_id=release_id, rollback_to=pending.rollback_to, active_release=release_id,
                preflight=preflight, health=health, swaps=tuple(swaps), removed_releases=_gc(root, keep_releases),
            )

        release_mark_status(releases_root=root, release_id=release_id, status="unhealthy")
        if health is None:
            failure, why = PromotionReason.RELOAD_FAILED, f"reload of {release_id} failed: {reload_error}"
        elif health.reason == "cancelled":
            failure, why = PromotionReason.CANCELLED, f"promotion of {release_id} cancelled during the probe window"
        else:
            failure, why = PromotionReason.HEALTH_FAILED, f"{release_id} unhealthy: {health.summary()}"
        if pending.rollback_to is None:
            release_promotion_end(releases_root=root)
            return PromotionResult(
                outcome=PromotionOutcome.FAILED, reason=PromotionReason.NO_ROLLBACK_TARGET,
                detail=f"{why}; no earlier release to roll back to, so {release_id} stays current",
                release_id=release_id, active_release=release_id, preflight=preflight, health=health,
                swaps=tuple(swaps),
            )
        result = _restore(releases_root=root, to_release=pending.rollback_to, reason=why, kind_reason=failure,
                          release_id=release_id, activator=activator, probes=probes, policy=policy, swaps=swaps,
                          preflight=preflight, health=health)
        return replace(result, removed_releases=_gc(root, keep_releases))


def hot_swap_recover(
    *,
    releases_root: Path | str,
    activator: Activator,
    probes: Sequence[Probe],
    interval_s: float = 5.0,
    window_s: float = 90.0,
    passes_required: int = 3,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> PromotionResult | None:
    """Finish a promotion whose promoter died (worker lost): roll back to the target recorded before its swap.
    None when no promotion is pending."""
    policy = HealthPolicy(interval_s=interval_s, window_s=window_s, passes_required=passes_required, sleep=sleep,
                          clock=clock)
    layout = release_layout(releases_root)
    with release_lock(layout.root):
        pending = state_load(layout).pending
        if pending is None:
            return None
        release_mark_status(releases_root=layout.root, release_id=pending.release_id, status="unhealthy")
        why = f"the promotion of {pending.release_id} started {pending.started_at} never finished"
        if pending.rollback_to is None:
            release_promotion_end(releases_root=layout.root)
            return PromotionResult(
                outcome=PromotionOutcome.FAILED, reason=PromotionReason.NO_ROLLBACK_TARGET,
                detail=f"{why}; no earlier release to roll back to", release_id=pending.release_id,
                active_release=current_release_id(layout),
            )
        return _restore(releases_root=layout.root, to_release=pending.rollback_to, reason=why,
                        kind_reason=PromotionReason.RECOVERED, release_id=pending.release_id, activator=activator,
                        probes=probes, policy=policy, swaps=[])


def hot_swap_rollback(
    *,
    releases_root: Path | str,
    activator: Activator,
    probes: Sequence[Probe],
    to_release: str | None = None,
    reason: str = "",
    interval_s: float = 5.0,
    window_s: float = 90.0,
    passes_required: int = 3,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    lock_timeout_s: float = 0.0,
) -> PromotionResult:
    """An operator's rollback (the release history's button): swap to `to_release`, by default the most recent
    healthy release other than the current one, reload and probe. Healthy → it becomes last-good."""
    policy = HealthPolicy(interval_s=interval_s, window_s=window_s, passes_required=passes_required, sleep=sleep,
                          clock=clock)
    layout = release_layout(releases_root)
    with release_lock(layout.root, timeout_s=lock_timeout_s):
        state = state_load(layout)
        current = current_release_id(layout)
        if state.pending is not None:
            raise DeployError(f"A promotion of {state.pending.release_id} is in progress or was interrupted; run "
                              "hot_swap_recover first.", code="deploy_pending")
        if to_release is None:
            to_release = next(
                (record.to_release for record in reversed(state.history)
                 if record.health == "healthy" and record.to_release != current
                 and layout.release_dir(record.to_release).is_dir()),
                None,
            )
            if to_release is None:
                raise DeployError(f"No earlier healthy release in {layout.root} to roll back to; name one.",
                                  code="no_rollback_target")
        elif not layout.release_dir(to_release).is_dir():
            raise DeployInvalid(f"Release {to_release} is not staged in {layout.releases_dir}.")
        why = reason or f"manual rollback from {current} to {to_release}"
        return _restore(releases_root=layout.root, to_release=to_release, reason=why,
                        kind_reason=PromotionReason.MANUAL, release_id=current or to_release, activator=activator,
                        probes=probes, policy=policy, swaps=[])
