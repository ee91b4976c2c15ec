"""Release directories under one root: stage, preflight, atomic swap of `current`, rollback, health marks, GC.

    <releases_root>/releases/<release_id>/   one immutable tree per release
    <releases_root>/current -> releases/<id>  swapped with rename(2), never unlinked
    <releases_root>/state.json               active, last-good, pending promotion, releases, swap history

Every change holds the root's lock (`release_lock`), so two promoters cannot interleave.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from evolution.deploy.commands import CommandRunner, command_argv, subprocess_command_runner
from evolution.deploy.errors import DeployBusy, DeployError, DeployInvalid, ReleaseExists, ReleaseNotFound, StageFailed
from evolution.deploy.health import ProbeReport, ProbeResult
from evolution.deploy.state import (
    PendingPromotion,
    ReleaseInfo,
    ReleaseState,
    SwapRecord,
    current_release_id,
    release_layout,
    release_lock,
    state_load,
    state_save,
    symlink_replace_atomic,
    utc_now,
)
from evolution.errors import GitError
from evolution.git import commit_export, repo_commit_resolve

STAGING_PREFIX = ".staging-"
COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc")


def release_state_get(*, releases_root: Path | str) -> ReleaseState:
    return state_load(release_layout(releases_root))


def release_current_get(*, releases_root: Path | str) -> str | None:
    """The release `current` points at (the truth on disk; state.json's `active` follows it)."""
    return current_release_id(release_layout(releases_root))


def release_stage(
    *,
    releases_root: Path | str,
    release_id: str,
    source_dir: Path | str | None = None,
    repo_path: Path | str | None = None,
    commit: str | None = None,
) -> Path:
    """Copy `source_dir` (without .git) or export `commit` of `repo_path` into releases/<release_id>/.

    The tree is built under a hidden staging name and renamed into place, so a half-copied release never carries
    its id. Staging the same source again under the same id returns the existing directory (a retried task).
    """
    layout = release_layout(releases_root)
    dest = layout.release_dir(release_id)
    if (source_dir is None) == (repo_path is None):
        raise DeployInvalid("Stage a release from either source_dir or repo_path + commit, not both or neither.")
    if repo_path is not None and not commit:
        raise DeployInvalid("Staging from repo_path needs the commit to export.")
    if source_dir is not None and not Path(source_dir).is_dir():
        raise DeployInvalid(f"Release source {source_dir} is not a directory.")
    source = str(Path(source_dir).absolute()) if source_dir is not None else str(Path(repo_path).absolute())
    if repo_path is not None:
        try:
            commit = repo_commit_resolve(repo_path=Path(repo_path), ref=commit)
        except GitError as exc:
            raise StageFailed(f"Staging release {release_id}: {exc.message}") from exc
    with release_lock(layout.root):
        state = state_load(layout)
        if dest.exists():
            info = state.releases.get(release_id)
            if info is not None and info.source == source and info.commit == commit:
                return dest
            raise ReleaseExists(
                f"Release {release_id} already exists in {layout.releases_dir} with other contents; "
                "choose a new release id.",
                extra={"release_id": release_id},
            )
        layout.releases_dir.mkdir(parents=True, exist_ok=True)
        staging = layout.releases_dir / f"{STAGING_PREFIX}{release_id}-{secrets.token_hex(4)}"
        try:
            if source_dir is not None:
                shutil.copytree(source_dir, staging, symlinks=True, ignore=COPY_IGNORE)
            else:
                commit_export(repo_path=Path(repo_path), commit=commit, dest=staging)
            os.rename(staging, dest)
        except (OSError, shutil.Error, GitError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StageFailed(f"Staging release {release_id} from {source} failed: {exc}") from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        state.releases[release_id] = ReleaseInfo(release_id=release_id, staged_at=utc_now(), source=source,
                                                 commit=commit)
        state_save(layout, state)
    return dest


def release_preflight(
    *,
    release_dir: Path,
    commands: Sequence[str | Sequence[str]],
    runner: CommandRunner = subprocess_command_runner,
    timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> ProbeReport:
    """Run each preflight command (import check, config validation, smoke) with cwd = the staged release; stops at
    the first failure. `{release_dir}` in a command is replaced by the release's path."""
    results: list[ProbeResult] = []
    for command in commands:
        argv = command_argv(command, release_dir=str(release_dir))
        at = utc_now()
        outcome = runner(argv, cwd=Path(release_dir), timeout_s=timeout_s, env=env)
        results.append(ProbeResult(name=" ".join(argv), ok=outcome.ok, detail=outcome.summary(), at=at,
                                   duration_s=round(outcome.duration_s, 4)))
        if not outcome.ok:
            return ProbeReport(ok=False, results=tuple(results))
    return ProbeReport(ok=True, results=tuple(results))


def release_swap(
    *, releases_root: Path | str, release_id: str, reason: str, kind: str = "promote"
) -> SwapRecord:
    """Point `current` at the release atomically and append the swap to the history.

    last-good is deliberately untouched: only `release_mark_healthy` moves it, after a healthy probe window.
    """
    layout = release_layout(releases_root)
    target = layout.release_dir(release_id)
    with release_lock(layout.root):
        if not target.is_dir():
            raise ReleaseNotFound(f"Release {release_id} is not staged under {layout.releases_dir}.")
        previous = current_release_id(layout)
        # The symlink first: if we die before state.json is written, `current` is the truth and the pending
        # promotion (written before any swap) still says where to roll back to.
        symlink_replace_atomic(layout.current, f"releases/{release_id}")
        state = state_load(layout)
        state.active = release_id
        record = SwapRecord(at=utc_now(), kind=kind, from_release=previous, to_release=release_id, reason=reason)
        state.history.append(record)
        state_save(layout, state)
    return record


def release_rollback(
    *, releases_root: Path | str, reason: str, to_release: str | None = None
) -> SwapRecord:
    """Swap back to `to_release`, else the last-good release, else the rollback target of a pending promotion."""
    layout = release_layout(releases_root)
    with release_lock(layout.root):
        state = state_load(layout)
        target = to_release or state.last_good or (state.pending.rollback_to if state.pending else None)
        if not target:
            raise DeployError(
                f"No release to roll back to in {layout.root}: nothing was ever marked healthy. "
                "Name the release explicitly (to_release).",
                code="no_rollback_target",
            )
        return release_swap(releases_root=layout.root, release_id=target, reason=reason, kind="rollback")


def _mark(state: ReleaseState, release_id: str, *, status: str) -> None:
    info = state.releases.get(release_id)
    if info is not None:
        state.releases[release_id] = ReleaseInfo(**{**info.to_dict(), "status": status})
    for index in range(len(state.history) - 1, -1, -1):
        record = state.history[index]
        if record.to_release == release_id:
            if record.health == "pending":
                state.history[index] = SwapRecord(**{**record.to_dict(), "health": status})
            break


def release_mark_healthy(*, releases_root: Path | str, release_id: str) -> ReleaseState:
    """The probe window passed: this release becomes last-good and any pending promotion of it is finished."""
    layout = release_layout(releases_root)
    with release_lock(layout.root):
        state = state_load(layout)
        state.last_good = release_id
        if state.pending is not None and state.pending.release_id == release_id:
            state.pending = None
        _mark(state, release_id, status="healthy")
        state_save(layout, state)
        return state


def release_mark_status(*, releases_root: Path | str, release_id: str, status: str) -> ReleaseState:
    """Record a verdict that does not vouch for the release ("unhealthy", "preflight_failed"): last-good stays."""
    if status not in ("unhealthy", "preflight_failed"):
        raise DeployInvalid(f"Status {status!r} is not a failure status; use release_mark_healthy for a good release.")
    layout = release_layout(releases_root)
    with release_lock(layout.root):
        state = state_load(layout)
        _mark(state, release_id, status=status)
        state_save(layout, state)
        return state


def release_promotion_begin(*, releases_root: Path | str, release_id: str, reason: str = "") -> PendingPromotion:
    """Remember where to roll back to before anything is swapped (last-good, else the active release).

    Beginning again for the same release (a retry after a crash) keeps the recorded target: by then `current` may
    already point at the new release, so recomputing it would make the broken release its own fallback.
    """
    layout = release_layout(releases_root)
    with release_lock(layout.root):
        state = state_load(layout)
        if state.pending is not None:
            if state.pending.release_id == release_id:
                return state.pending
            raise DeployBusy(
                f"The promotion of {state.pending.release_id} in {layout.root} never finished (the promoter died?); "
                "run hot_swap_recover first, it rolls that release back.",
                extra={"pending": state.pending.to_dict()},
            )
        candidates = (state.last_good, current_release_id(layout))
        rollback_to = next((c for c in candidates if c is not None and c != release_id), None)
        state.pending = PendingPromotion(release_id=release_id, rollback_to=rollback_to, started_at=utc_now(),
                                         reason=reason)
        state_save(layout, state)
        return state.pending


def release_promotion_end(*, releases_root: Path | str) -> None:
    layout = release_layout(releases_root)
    with release_lock(layout.root):
        state = state_load(layout)
        state.pending = None
        state_save(layout, state)


def release_gc(*, releases_root: Path | str, keep: int = 5) -> list[str]:
    """Delete all but the `keep` most recently staged releases; the current, last-good and pending ones always stay.

    Leftover staging directories are deleted too: staging holds the lock, so none of them is in progress."""
    if not isinstance(keep, int) or keep < 1:
        raise DeployInvalid(f"keep must be a whole number ≥ 1 (releases to retain), got {keep!r}.")
    layout = release_layout(releases_root)
    removed: list[str] = []
    with release_lock(layout.root):
        if not layout.releases_dir.is_dir():
            return removed
        state = state_load(layout)
        protected = {current_release_id(layout), state.active, state.last_good}
        if state.pending is not None:
            protected |= {state.pending.release_id, state.pending.rollback_to}
        releases = []
        for path in layout.releases_dir.iterdir():
            if path.name.startswith(STAGING_PREFIX):
                shutil.rmtree(path, ignore_errors=True)
            elif path.is_dir() and not path.is_symlink():
                info = state.releases.get(path.name)
                # ISO timestamps sort as text; releases staged by hand fall back to their directory's mtime.
                staged = info.staged_at if info else ""
                releases.append((staged, path.stat().st_mtime, path.name))
        releases.sort(reverse=True)
        retained = {name for _, _, name in releases[:keep]} | protected
        for _, _, name in releases:
            if name not in retained:
                shutil.rmtree(layout.releases_dir / name)
                state.releases.pop(name, None)
                removed.append(name)
        if removed:
            state_save(layout, state)
    return sorted(removed)
