"""A job's files: the target's mirror, the job's detached worktree, the pinned export of the base commit that graders
and the suite run from, and the content-addressed artifact store (evolution.md §7.5)."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from django.utils import timezone

from evolution import git
from evolution.config import evolution_dir
from evolution.models import Artifact, EvolutionJob, Iteration, StageRun

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobPaths:
    root: Path

    @property
    def worktree(self) -> Path:
        return self.root / "wt"

    @property
    def base_export(self) -> Path:
        return self.root / "base"

    @property
    def trials(self) -> Path:
        return self.root / "trials"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"


def mirror_path(*, target_id: int) -> Path:
    return evolution_dir() / "repos" / f"{target_id}.git"


def job_paths(*, job_id: int) -> JobPaths:
    return JobPaths(root=evolution_dir() / "jobs" / str(job_id))


def job_workspace_prepare(*, job: EvolutionJob) -> str:
    """Sync the mirror, resolve the base commit, add the detached worktree and the pinned base export."""
    mirror = mirror_path(target_id=job.target_id)
    mirror.parent.mkdir(parents=True, exist_ok=True)
    paths = job_paths(job_id=job.pk)
    git.repo_mirror_sync(source=job.config_snapshot["source"], mirror_path=mirror)
    base = job.base_commit or git.repo_commit_resolve(
        repo_path=mirror, ref=job.config_snapshot.get("default_branch") or "HEAD")
    if paths.worktree.exists():  # a redelivered prepare: start from a clean worktree
        git.worktree_remove(mirror_path=mirror, worktree_path=paths.worktree)
    paths.root.mkdir(parents=True, exist_ok=True)
    git.worktree_add(mirror_path=mirror, worktree_path=paths.worktree, commit=base)
    if paths.base_export.exists():
        shutil.rmtree(paths.base_export)
    git.commit_export(repo_path=mirror, commit=base, dest=paths.base_export)
    for directory in (paths.trials, paths.logs, paths.scratch):
        directory.mkdir(parents=True, exist_ok=True)
    return base


def job_workspace_remove(*, job_id: int) -> None:
    """Remove the worktree (and its registration in the mirror) and the job's working files; artifacts stay."""
    job = EvolutionJob.objects.filter(pk=job_id).only("target_id").first()
    paths = job_paths(job_id=job_id)
    if job is not None:
        mirror = mirror_path(target_id=job.target_id)
        if mirror.exists():
            git.worktree_remove(mirror_path=mirror, worktree_path=paths.worktree)
    if paths.root.exists():
        shutil.rmtree(paths.root, ignore_errors=True)


def worktree_at(*, job: EvolutionJob, commit: str) -> Path:
    """The job's worktree reset to exactly `commit` (nothing left over from a previous role, round or trial)."""
    worktree = job_paths(job_id=job.pk).worktree
    git.worktree_reset(worktree_path=worktree, commit=commit)
    return worktree


# --- artifacts --------------------------------------------------------------------------------------------------------


def artifact_store(*, job: EvolutionJob, kind: str, name: str, content: bytes | str | dict | list,
                   iteration: Iteration | None = None, stage_run: StageRun | None = None,
                   mime: str | None = None) -> Artifact:
    if isinstance(content, (dict, list)):
        data = json.dumps(content, indent=2, sort_keys=True, default=str).encode()
        mime = mime or "application/json"
    elif isinstance(content, str):
        data = content.encode()
        mime = mime or "text/plain"
    else:
        data = content
        mime = mime or "application/octet-stream"
    sha = hashlib.sha256(data).hexdigest()
    relative = Path("artifacts") / sha[:2] / sha
    path = evolution_dir() / relative
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_bytes(data)
        tmp.replace(path)
    return Artifact.objects.create(job=job, iteration=iteration, stage_run=stage_run, kind=kind, name=name,
                                   sha256=sha, size=len(data), mime=mime, path=str(relative))


def artifact_read(*, artifact: Artifact) -> bytes:
    return (evolution_dir() / artifact.path).read_bytes()


def artifact_json(*, artifact: Artifact):
    return json.loads(artifact_read(artifact=artifact))


# --- liveness and cancellation inside long stages ---------------------------------------------------------------------


class StopGuard:
    """Polled by the sandbox (~every 0.2 s) and between trials: says whether the job was asked to stop, and keeps
    its heartbeat fresh, each throttled so the database sees a few queries a second at most."""

    def __init__(self, *, job_id: int, check_every_s: float = 1.0, beat_every_s: float | None = None):
        from django.conf import settings

        self.job_id = job_id
        self.check_every_s = check_every_s
        self.beat_every_s = beat_every_s or settings.CLEAR_EVOLUTION_HEARTBEAT_SECONDS
        self._checked = 0.0
        self._beaten = 0.0
        self.stopped = False

    def beat(self) -> None:
        EvolutionJob.objects.filter(pk=self.job_id).update(heartbeat_at=timezone.now())
        self._beaten = time.monotonic()

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self._beaten >= self.beat_every_s:
            self.beat()
        if not self.stopped and now - self._checked >= self.check_every_s:
            self._checked = now
            self.stopped = EvolutionJob.objects.filter(pk=self.job_id, stop_requested=True).exists()
        return self.stopped


class Heartbeat:
    """While a stage runs: a thread marks the job alive every CLEAR_EVOLUTION_HEARTBEAT_SECONDS (a coding agent may
    work for most of an hour without returning) and, once the job is asked to stop, calls the registered stop hooks
    (e.g. the backend's cancel()). It uses its own database connection and closes it."""

    _current = threading.local()

    def __init__(self, *, job_id: int, every_s: float | None = None):
        from django.conf import settings

        self.job_id = job_id
        self.every_s = every_s or settings.CLEAR_EVOLUTION_HEARTBEAT_SECONDS
        self._done = threading.Event()
        self._hooks: list = []
        self._thread = threading.Thread(target=self._loop, name=f"evolution-heartbeat-{job_id}", daemon=True)

    @classmethod
    def on_stop(cls, hook) -> None:
        """Register a hook on the heartbeat of the stage running in this thread (none: nothing to register)."""
        current = getattr(cls._current, "beat", None)
        if current is not None:
            current._hooks.append(hook)

    def _loop(self) -> None:
        from django.db import connection

        try:
            while not self._done.wait(self.every_s):
                try:
                    EvolutionJob.objects.filter(pk=self.job_id).update(heartbeat_at=timezone.now())
                    if EvolutionJob.objects.filter(pk=self.job_id, stop_requested=True).exists():
                        for hook in list(self._hooks):
                            hook()
                except Exception:  # a missed beat is retried next time; the janitor only acts after many
                    logger.exception("evolution: heartbeat of job %s failed", self.job_id)
                    connection.close()
        finally:
            connection.close()

    def __enter__(self) -> Heartbeat:
        Heartbeat._current.beat = self
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        Heartbeat._current.beat = None
        self._done.set()
        self._thread.join(timeout=30)
