"""Git mechanics of evolution (research §7.5): a bare mirror per target, a detached worktree per job, and the
orchestrator's own commits, resets, diffs, exports and pushes.

Every call runs `git` with no user or system config and a fixed identity. A worktree's `.git` file lives inside the
candidate's writable area, so a candidate could point it at a crafted git dir whose config (core.fsmonitor, filter
drivers, hooks) would run commands outside the sandbox the next time the orchestrator calls git. `worktree_add`
therefore records the real git dir next to the worktree, outside it, and later calls pass it explicitly.
"""

import fcntl
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evolution.errors import GitError

BOT_NAME = "evolution-bot"
BOT_EMAIL = "evolution-bot@clear.invalid"
GIT_TIMEOUT_S = 600  # local work (worktrees, diffs, archives); what reaches a remote has network_timeout()
# Overrides whatever a repository's own config says: no hooks, no fsmonitor daemon, no pager. A root worker hands
# job worktrees to the sandbox user (evolution/sandbox/profile.py), and git refuses a tree another user owns; the
# ownership check guards against a crafted .git, which the explicit git dirs of this module already exclude.
_HARDENING = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat",
              "-c", "protocol.ext.allow=never", "-c", "safe.directory=*"]
_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")
_STATUS = {"A": "added", "M": "modified", "D": "deleted", "T": "type_changed"}


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str  # added | modified | deleted | type_changed
    added: int  # lines; 0 for binary files
    deleted: int
    binary: bool


def _redact(text: str) -> str:
    return _CREDENTIALS.sub(r"\1***@", text)


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": BOT_NAME,
        "GIT_AUTHOR_EMAIL": BOT_EMAIL,
        "GIT_COMMITTER_NAME": BOT_NAME,
        "GIT_COMMITTER_EMAIL": BOT_EMAIL,
    }
    # Pushing over SSH needs the worker's keys and agent.
    for name in ("HOME", "SSH_AUTH_SOCK", "GIT_SSH_COMMAND"):
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra or {})
    return env


def network_timeout() -> float:
    """The bound of a clone, fetch or push (CLEAR_GIT_TIMEOUT_SECONDS): a silent host must not hold a worker for
    long, nor an operator's shell."""
    from django.conf import settings

    return float(getattr(settings, "CLEAR_GIT_TIMEOUT_SECONDS", 60))


def _run(argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], stdin: bytes | None,
         timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run in a session of its own, the whole session killed when the time is up: git leaves the
    network to helpers (git-remote-https, ssh) that killing git alone would leave running, and subprocess.run
    would then wait for the pipes they hold open."""
    with subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(stdin, timeout=timeout)
        except BaseException:  # the time is up, or the operator's Ctrl-C in manage.py
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.communicate(timeout=10)
            raise
    return subprocess.CompletedProcess(list(argv), process.returncode, stdout, stderr)


def _git(args: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
         ok_codes: Sequence[int] = (0,), stdin: bytes | None = None,
         timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess:
    argv = ["git", *_HARDENING, *args]
    try:
        completed = _run(argv, cwd=cwd, env=_env(env), stdin=stdin, timeout=timeout)
    except FileNotFoundError as exc:
        raise GitError("git is not installed on the worker (apt-get install git)") from exc
    except subprocess.TimeoutExpired as exc:
        raise GitError(_redact(f"git {' '.join(args)} did not finish within {timeout:g} s")) from exc
    if completed.returncode not in ok_codes:
        stderr = completed.stderr.decode("utf-8", "replace").strip()
        where = f" in {cwd}" if cwd else ""
        raise GitError(_redact(f"git {' '.join(args)} failed{where} (exit {completed.returncode}): {stderr}"),
                       extra={"exit_code": completed.returncode})
    return completed


def _out(completed: subprocess.CompletedProcess) -> str:
    return completed.stdout.decode("utf-8", "replace").strip()


@contextmanager
def _mirror_lock(mirror_path: Path) -> Iterator[None]:
    # git locks .git/worktrees itself but fails instead of waiting; workers in other processes queue here.
    lock_path = Path(f"{mirror_path}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gitdir_record(worktree_path: Path) -> Path:
    return worktree_path.parent / f".{worktree_path.name}.gitdir"


def _worktree_env(worktree_path: Path) -> dict[str, str]:
    """GIT_DIR and GIT_WORK_TREE from the record worktree_add wrote, never from the worktree's own `.git` file."""
    worktree_path = Path(worktree_path).resolve()
    if not worktree_path.is_dir():
        raise GitError(f"worktree {worktree_path} does not exist")
    record = _gitdir_record(worktree_path)
    if record.is_file():
        gitdir = record.read_text().strip()
    else:  # a worktree or clone this module did not create: trust git's own discovery
        gitdir = _out(_git(["rev-parse", "--absolute-git-dir"], cwd=worktree_path))
    return {"GIT_DIR": gitdir, "GIT_WORK_TREE": str(worktree_path)}


def _repo_env(repo_path: Path) -> dict[str, str] | None:
    """For calls that take any repository: a mirror, a clone, or a worktree made by worktree_add."""
    return _worktree_env(repo_path) if _gitdir_record(Path(repo_path).resolve()).is_file() else None


def _repo(args: Sequence[str], *, repo_path: Path, ok_codes: Sequence[int] = (0,)) -> subprocess.CompletedProcess:
    return _git(args, cwd=Path(repo_path), env=_repo_env(repo_path), ok_codes=ok_codes)


def _wt(args: Sequence[str], *, worktree_path: Path, env: Mapping[str, str] | None = None,
        ok_codes: Sequence[int] = (0,)) -> subprocess.CompletedProcess:
    return _git(args, cwd=Path(worktree_path), env={**_worktree_env(worktree_path), **(env or {})},
                ok_codes=ok_codes)


def _source_arg(source: str) -> str:
    path = Path(source).expanduser()
    return str(path.resolve()) if path.exists() else source


def _is_local(source: str) -> bool:
    # What git reads from the disk: a path, or file://. The operator (or CLEAR_EVOLUTION_SOURCE_ROOTS) chose it.
    return source.startswith(("/", "file://", "./", "../", "~")) or Path(source).expanduser().exists()


def _pinned(source: str) -> tuple[list[str], dict[str, str]]:
    """The git options and environment that keep a clone, fetch or push of a remote URL on the addresses the
    outbound policy checked (clear/outbound: https or ssh, public addresses unless CLEAR_GIT_ALLOW_PRIVATE, no
    redirects, no proxy that would resolve the name again). Raises GitError naming why it is refused."""
    if _is_local(source):
        return [], {}
    from clear.outbound import OutboundInvalidError, OutboundUnresolvedError, outbound_target_resolve
    from clear.outbound.pinned import outbound_git_pin

    try:
        target = outbound_target_resolve(url=source, purpose="git", field="source")
    except OutboundUnresolvedError as exc:
        raise GitError(_redact(f"could not resolve host: {exc.message}")) from None
    except OutboundInvalidError as exc:
        raise GitError(_redact(f"address not allowed: {exc.message}"), code="git_address_refused") from None
    pin = outbound_git_pin(target=target, ssh_command=os.environ.get("GIT_SSH_COMMAND") or "ssh")
    return list(pin.config), dict(pin.env)


def repo_mirror_sync(*, source: str, mirror_path: Path) -> None:
    """A bare mirror of `source` (a local path or a git URL): cloned the first time, fetched with prune later."""
    mirror_path = Path(mirror_path)
    source_arg = _source_arg(source)
    # A local source owned by another user (the worker often runs as its own uid) is trusted: an admin named it.
    trust = ["-c", f"safe.directory={source_arg}"] if source_arg.startswith("/") else []
    pin, pin_env = _pinned(source_arg)
    with _mirror_lock(mirror_path):
        if (mirror_path / "HEAD").is_file():
            _git(["remote", "set-url", "origin", source_arg], cwd=mirror_path)  # the target's source may have moved
            _git([*trust, *pin, "fetch", "--prune", "--quiet", "origin"], cwd=mirror_path, env=pin_env,
                 timeout=network_timeout())
        else:
            if mirror_path.exists() and any(mirror_path.iterdir()):
                raise GitError(f"{mirror_path} exists but is not a git mirror; remove it or pick another path")
            mirror_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                _git([*trust, *pin, "clone", "--mirror", "--quiet", "--", source_arg, str(mirror_path)],
                     env=pin_env, timeout=network_timeout())
            except GitError:
                # A clone killed at its bound leaves a partial directory, which every later sync would refuse.
                shutil.rmtree(mirror_path, ignore_errors=True)
                raise
        # Candidate commits (promoted releases, the base of later hot-swap jobs) are made in worktrees of the mirror
        # and reached by no ref: a mirror's `fetch --prune` deletes any ref the source lacks, so none can pin them.
        # Garbage collection is told never to prune unreachable objects instead.
        _git(["config", "gc.pruneExpire", "never"], cwd=mirror_path)


def repo_commit_resolve(*, repo_path: Path, ref: str) -> str:
    completed = _repo(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
                      repo_path=repo_path, ok_codes=(0, 1))
    sha = _out(completed)
    if completed.returncode != 0 or not sha:
        raise GitError(f"{ref!r} is not a commit in {repo_path}; name a branch, tag or commit sha that exists there")
    return sha


def worktree_add(*, mirror_path: Path, worktree_path: Path, commit: str) -> None:
    worktree_path = Path(worktree_path).resolve()
    if worktree_path.exists() and any(worktree_path.iterdir()):
        raise GitError(f"cannot create a worktree at {worktree_path}: the directory is not empty")
    worktree_path.parent.mkdir(parents=True, exist_ok=True)
    with _mirror_lock(Path(mirror_path)):
        _git(["worktree", "add", "--detach", "--quiet", str(worktree_path), commit], cwd=Path(mirror_path))
    gitdir = _out(_git(["rev-parse", "--absolute-git-dir"], cwd=worktree_path))
    _gitdir_record(worktree_path).write_text(gitdir + "\n")


def worktree_remove(*, mirror_path: Path, worktree_path: Path) -> None:
    """Remove the worktree and its registration; a worktree already gone is no error."""
    worktree_path = Path(worktree_path).resolve()
    with _mirror_lock(Path(mirror_path)):
        if worktree_path.exists():
            # Twice --force: also removes a locked worktree. Fails when git no longer knows it; rmtree covers that.
            _git(["worktree", "remove", "--force", "--force", str(worktree_path)], cwd=Path(mirror_path),
                 ok_codes=(0, 128))
            shutil.rmtree(worktree_path, ignore_errors=True)
        _git(["worktree", "prune"], cwd=Path(mirror_path))
    _gitdir_record(worktree_path).unlink(missing_ok=True)


def worktree_tree_hash(*, worktree_path: Path) -> str:
    """The tree hash of everything in the worktree, untracked files included (ignored files excluded).

    Built in a throwaway index so the real one, and with it `git status`, stays as it was.
    """
    env = _worktree_env(worktree_path)
    with tempfile.TemporaryDirectory(prefix="clear-tree-hash-") as tmp:
        index = Path(tmp) / "index"
        real_index = Path(env["GIT_DIR"]) / "index"
        if real_index.is_file():
            shutil.copyfile(real_index, index)  # a head start: only changed files get hashed again
        extra = {"GIT_INDEX_FILE": str(index)}
        _wt(["add", "--all", "--", "."], worktree_path=worktree_path, env=extra)
        return _out(_wt(["write-tree"], worktree_path=worktree_path, env=extra))


def worktree_commit_all(*, worktree_path: Path, message: str) -> str | None:
    """Commit every change (new, modified, deleted files) as evolution-bot; None when nothing changed."""
    _wt(["add", "--all", "--", "."], worktree_path=worktree_path)
    staged = _wt(["diff", "--cached", "--quiet", "--no-ext-diff"], worktree_path=worktree_path, ok_codes=(0, 1))
    if staged.returncode == 0:
        return None
    _wt(["commit", "--quiet", "--no-verify", "--no-gpg-sign", "--allow-empty-message", "-m", message],
        worktree_path=worktree_path)
    return _out(_wt(["rev-parse", "HEAD"], worktree_path=worktree_path))


def worktree_reset(*, worktree_path: Path, commit: str) -> None:
    """Back to exactly `commit`: tracked changes dropped, untracked and ignored files deleted."""
    _wt(["reset", "--quiet", "--hard", commit], worktree_path=worktree_path)
    _wt(["clean", "-ffdxq"], worktree_path=worktree_path)


def patch_apply(*, workdir: Path, patch: str) -> None:
    """Apply a unified (or `--binary`) diff to the files under workdir, which need not be a git checkout."""
    # GIT_DIR at an empty dir: paths stay relative to workdir even inside a repository, and no repo config is read.
    with tempfile.TemporaryDirectory(prefix="clear-apply-") as empty:
        env = {"GIT_DIR": empty, "GIT_WORK_TREE": str(Path(workdir).resolve())}
        _git(["apply", "--whitespace=nowarn", "-"], cwd=Path(workdir), env=env,
             stdin=patch.encode("utf-8", "surrogateescape"))


def commit_diff(*, repo_path: Path, base: str, head: str) -> str:
    """`git diff --binary base head`: applies with `git apply` on a checkout of base."""
    completed = _repo(["diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv", base, head, "--"],
                      repo_path=repo_path)
    return completed.stdout.decode("utf-8", "surrogateescape")


def _z_fields(raw: bytes) -> list[str]:
    return [field.decode("utf-8", "surrogateescape") for field in raw.split(b"\0")]


def commit_diff_stats(*, repo_path: Path, base: str, head: str) -> list[FileChange]:
    """One entry per changed path (renames count as a deletion and an addition), sorted by path."""
    common = ["--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", "-z", base, head, "--"]
    statuses: dict[str, str] = {}
    fields = _z_fields(_repo(["diff", "--name-status", *common], repo_path=repo_path).stdout)
    for letter, path in zip(fields[0::2], fields[1::2]):
        if letter:
            statuses[path] = _STATUS.get(letter[0], letter)
    changes = []
    for entry in _z_fields(_repo(["diff", "--numstat", *common], repo_path=repo_path).stdout):
        if not entry:
            continue
        added, deleted, path = entry.split("\t", 2)
        binary = added == "-"
        changes.append(FileChange(path=path, status=statuses.get(path, "modified"), added=0 if binary else int(added),
                                  deleted=0 if binary else int(deleted), binary=binary))
    return sorted(changes, key=lambda change: change.path)


def commit_export(*, repo_path: Path, commit: str, dest: Path) -> None:
    """The files of `commit` (no .git) unpacked into dest, which is created if needed."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    sha = repo_commit_resolve(repo_path=repo_path, ref=commit)
    with tempfile.TemporaryFile() as archive:
        argv = ["git", *_HARDENING, "archive", "--format=tar", sha]
        completed = subprocess.run(argv, cwd=repo_path, env=_env(_repo_env(repo_path)), stdout=archive,
                                   stderr=subprocess.PIPE, timeout=GIT_TIMEOUT_S, check=False)
        if completed.returncode != 0:
            raise GitError(f"git archive {sha} failed in {repo_path}: {completed.stderr.decode(errors='replace')}")
        archive.seek(0)
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            # The "data" filter refuses absolute paths, links out of dest and device files.
            tar.extractall(dest, filter="data")


def branch_push(*, repo_path: Path, commit: str, remote_url: str, branch: str) -> None:
    """Push `commit` as a new branch; an existing branch on the remote is not overwritten."""
    check = _git(["check-ref-format", f"refs/heads/{branch}"], ok_codes=(0, 1))
    if check.returncode != 0:
        raise GitError(f"{branch!r} is not a valid branch name")
    sha = repo_commit_resolve(repo_path=repo_path, ref=commit)
    pin, pin_env = _pinned(remote_url)
    _git([*pin, "push", "--quiet", "--no-verify", "--", remote_url, f"{sha}:refs/heads/{branch}"],
         cwd=Path(repo_path), env={**(_repo_env(repo_path) or {}), **pin_env}, timeout=network_timeout())
