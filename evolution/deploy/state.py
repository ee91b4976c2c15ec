"""The release root on disk: layout, the `state.json` record and the lock that serialises every change to it.

`state.json` is the record of the last-good release kept outside any request or database (MOSS's
`last-good-image.txt`, evolution.md §2.8): a crash at any step leaves it either as it was or fully rewritten, because
it is only ever replaced whole (temp file, fsync, os.replace, fsync of the directory).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evolution.deploy.errors import DeployBusy, DeployInvalid, DeployStateCorrupt

STATE_VERSION = 1
HISTORY_LIMIT = 500
RELEASE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class ReleaseLayout:
    root: Path

    @property
    def releases_dir(self) -> Path:
        return self.root / "releases"

    @property
    def current(self) -> Path:
        return self.root / "current"

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    @property
    def lock_path(self) -> Path:
        return self.root / ".lock"

    def release_dir(self, release_id: str) -> Path:
        return self.releases_dir / release_id_validate(release_id)


def release_layout(releases_root: Path | str) -> ReleaseLayout:
    return ReleaseLayout(root=Path(releases_root).absolute())


def release_id_validate(release_id: str) -> str:
    if not isinstance(release_id, str) or not RELEASE_ID_RE.fullmatch(release_id):
        raise DeployInvalid(
            f"Release id {release_id!r} is not usable as a directory name: use 1-128 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit (e.g. 'job-42-1a2b3c4')."
        )
    return release_id


@dataclass(frozen=True)
class SwapRecord:
    at: str
    kind: str  # "promote" | "rollback" | "manual"
    from_release: str | None
    to_release: str
    reason: str
    health: str = "pending"  # "pending" | "healthy" | "unhealthy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PendingPromotion:
    """A promotion between "last-good remembered" and "healthy or rolled back"; survives a crash of the promoter."""

    release_id: str
    rollback_to: str | None
    started_at: str
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReleaseInfo:
    release_id: str
    staged_at: str
    source: str
    commit: str | None = None
    status: str = "staged"  # "staged" | "preflight_failed" | "healthy" | "unhealthy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReleaseState:
    active: str | None = None
    last_good: str | None = None
    pending: PendingPromotion | None = None
    releases: dict[str, ReleaseInfo] = field(default_factory=dict)
    history: list[SwapRecord] = field(default_factory=list)
    updated_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "active": self.active,
            "last_good": self.last_good,
            "pending": self.pending.to_dict() if self.pending else None,
            "releases": {release_id: info.to_dict() for release_id, info in self.releases.items()},
            "history": [record.to_dict() for record in self.history],
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseState:
        pending = data.get("pending")
        return cls(
            active=data.get("active"),
            last_good=data.get("last_good"),
            pending=PendingPromotion(**pending) if pending else None,
            releases={key: ReleaseInfo(**value) for key, value in (data.get("releases") or {}).items()},
            history=[SwapRecord(**record) for record in data.get("history") or []],
            updated_at=data.get("updated_at"),
        )


def state_load(layout: ReleaseLayout) -> ReleaseState:
    try:
        text = layout.state_path.read_text()
    except FileNotFoundError:
        return ReleaseState()
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the top level is not an object")
        return ReleaseState.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise DeployStateCorrupt(
            f"{layout.state_path} cannot be read ({exc}). It is only ever replaced whole, so this file was edited by "
            f"hand or by another program: fix it, or delete it to start a fresh record (the `current` symlink still "
            f"shows the active release).",
            extra={"path": str(layout.state_path)},
        ) from exc


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_replace_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def state_save(layout: ReleaseLayout, state: ReleaseState) -> None:
    state.history = state.history[-HISTORY_LIMIT:]
    state.updated_at = utc_now()
    file_replace_atomic(layout.state_path, (json.dumps(state.to_dict(), indent=2) + "\n").encode())


def symlink_replace_atomic(link: Path, target: str) -> None:
    """Point `link` at `target` with one rename(2): readers see the old or the new target, never nothing.

    `ln -sfn` unlinks and then creates (evolution.md §6.2), which leaves a window with no `current` at all.
    """
    if link.exists() and not link.is_symlink():
        raise DeployInvalid(
            f"{link} is a real directory, not a symlink. Move it to {link.parent / 'releases'}/<id> so releases can "
            "be swapped atomically."
        )
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(link.parent)


def current_release_id(layout: ReleaseLayout) -> str | None:
    try:
        target = os.readlink(layout.current)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # not a symlink
            return None
        raise
    return Path(target).name


_held_locks: dict[str, list[Any]] = {}  # root -> [fd, depth, owning thread]
_held_guard = threading.Lock()


@contextmanager
def release_lock(releases_root: Path | str, *, timeout_s: float = 0.0) -> Iterator[None]:
    """Exclusive lock on a release root, re-entrant within one thread (a promotion holds it while it stages, swaps
    and rolls back); another process or thread gets DeployBusy after `timeout_s`."""
    layout = release_layout(releases_root)
    key = str(layout.root)
    ident = threading.get_ident()
    with _held_guard:
        entry = _held_locks.get(key)
        if entry is not None and entry[2] == ident:
            entry[1] += 1
            reentrant = True
        else:
            reentrant = False
    if reentrant:
        try:
            yield
        finally:
            with _held_guard:
                entry[1] -= 1
        return
    layout.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise DeployBusy(
                    f"Another deploy (pid {holder}) is working on {layout.root}; wait for it to finish.",
                    extra={"releases_root": key},
                ) from None
            time.sleep(0.05)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    with _held_guard:
        _held_locks[key] = [fd, 1, ident]
    try:
        yield
    finally:
        with _held_guard:
            del _held_locks[key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
