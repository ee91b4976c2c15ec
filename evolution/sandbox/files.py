"""Reading what a contained run wrote without lending it the worker's rights.

The worker is often root, and a sandboxed command chooses every name under the folders it may write. Reading those
names the ordinary way would follow a symbolic link to /proc/self/environ or /etc/shadow, read a hard link to a file
only root may read, block forever on a FIFO and load a 10 GB sparse file into memory. So every directory is opened
relative to its parent's descriptor with O_NOFOLLOW (no component can be swapped for a link between two steps), every
file with O_NOFOLLOW|O_NONBLOCK, and what fstat says about the open file decides whether it is read: a regular file,
one link, owned by the user the run wrote as, and small. Anything else is listed with the reason instead of content.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evolution.errors import SandboxUnavailable
from evolution.sandbox.profile import sandbox_identity
from evolution.sandbox.types import IsolationLevel

MAX_FILE_BYTES = 1024 * 1024
MAX_FILES = 20
MAX_DEPTH = 8
# Bounds on what a walk looks at, whatever the files: a run can make a million empty directories or names.
MAX_DIRS = 200
MAX_NAMES_PER_DIR = 2000

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO swapped in after the lstat returns at once instead of waiting for a writer.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


@dataclass(frozen=True)
class WrittenFile:
    path: str  # relative to the folder read, "/"-separated
    data: bytes | None  # None when skipped
    skipped: str = ""  # why it was not read: "symbolic link", "hard link", "larger than 1 MB", ...
    size: int = 0  # st_size of the open file (0 when it was never opened)

    def text(self, *, max_chars: int) -> str:
        """The content as text, or what the trial trace shows in its place."""
        if self.data is None:
            return f"skipped: {self.skipped}"
        return self.data.decode("utf-8", errors="replace")[:max_chars]


def owner_limits(*, level: str | None = None, max_bytes: int = MAX_FILE_BYTES) -> dict[int, int]:
    """Who may own a file a run wrote (uid → the most bytes read of it).

    A run at the subprocess level, or under a worker that is not root, writes as the worker itself; a contained run
    under a root worker writes as the sandbox user (evolution/sandbox/profile.py). Without a level (a folder written
    by runs of several levels, or by the worker and then a run) either is accepted.
    """
    worker = os.geteuid()
    subprocess_level = level is not None and str(level) == IsolationLevel.SUBPROCESS
    try:
        identity = sandbox_identity()
    except SandboxUnavailable:
        # A root worker without its sandbox user starts no contained run: no file of one can be there to read.
        return {worker: max_bytes} if level is None or subprocess_level else {}
    contained = identity.uid if identity is not None else worker
    if level is None:
        return {worker: max_bytes, contained: max_bytes}
    return {worker if subprocess_level else contained: max_bytes}


def written_file_read(*, folder: Path, relative: str, owners: Mapping[int, int]) -> WrittenFile | None:
    """The file at `relative` under `folder` (None when there is none), no component of it followed as a link."""
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute() or any(part in ("..", ".") for part in parts):
        raise ValueError(f"{relative!r} is not a plain relative path")
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        for depth, part in enumerate(parts[:-1]):
            inner = _dir_open(dir_fd=fd, name=part)
            if inner is None:
                return None
            if isinstance(inner, str):
                return WrittenFile(path="/".join(parts[:depth + 1]), data=None, skipped=inner)
            os.close(fd)
            fd = inner
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return _entry_read(dir_fd=fd, name=parts[-1], relative="/".join(parts), st=st, owners=owners)
    finally:
        os.close(fd)


def written_tree_read(*, folder: Path, owners: Mapping[int, int], max_files: int = MAX_FILES,
                      max_depth: int = MAX_DEPTH) -> list[WrittenFile]:
    """Every file under `folder` in path order, at most `max_files` of them (directories do not count)."""
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    walk = _Walk(owners=owners, max_files=max_files, max_depth=max_depth)
    try:
        walk.directory(fd=fd, prefix="", depth=0)
    finally:
        os.close(fd)
    return walk.found


class _Walk:
    def __init__(self, *, owners: Mapping[int, int], max_files: int, max_depth: int) -> None:
        self.owners, self.max_files, self.max_depth = owners, max_files, max_depth
        self.found: list[WrittenFile] = []
        self.dirs_left = MAX_DIRS

    def directory(self, *, fd: int, prefix: str, depth: int) -> None:
        self.dirs_left -= 1
        names: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) >= MAX_NAMES_PER_DIR:
                    break
        for name in sorted(names):
            if len(self.found) >= self.max_files:
                return
            relative = prefix + name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                self.found.append(_entry_read(dir_fd=fd, name=name, relative=relative, st=st, owners=self.owners))
                continue
            if depth + 1 > self.max_depth or self.dirs_left <= 0:
                self.found.append(WrittenFile(path=relative + "/", data=None, skipped="too many nested folders"))
                continue
            inner = _dir_open(dir_fd=fd, name=name)
            if not isinstance(inner, int):  # replaced by a link (or removed) since the lstat
                self.found.append(WrittenFile(path=relative, data=None, skipped=inner or "removed while read"))
                continue
            try:
                self.directory(fd=inner, prefix=relative + "/", depth=depth + 1)
            finally:
                os.close(inner)


def _entry_read(*, dir_fd: int, name: str, relative: str, st: os.stat_result,
                owners: Mapping[int, int]) -> WrittenFile:
    # The lstat spares opening what is plainly not a file (a FIFO, a device); fstat of the open file then decides.
    if stat.S_ISLNK(st.st_mode):
        return WrittenFile(path=relative, data=None, skipped="symbolic link")
    if not stat.S_ISREG(st.st_mode):
        return WrittenFile(path=relative, data=None, skipped="not a regular file")
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        return WrittenFile(path=relative, data=None, skipped=_open_refusal(error))
    try:
        st = os.fstat(fd)
        refusal = _refusal(st, owners)
        if refusal:
            return WrittenFile(path=relative, data=None, skipped=refusal, size=st.st_size)
        return WrittenFile(path=relative, data=_read_at_most(fd, owners[st.st_uid]), size=st.st_size)
    finally:
        os.close(fd)


def _refusal(st: os.stat_result, owners: Mapping[int, int]) -> str:
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_nlink != 1:  # another name for a file the run could not otherwise read
        return "hard link"
    if st.st_uid not in owners:
        return "not owned by the sandbox user"
    if st.st_size > owners[st.st_uid]:
        return f"larger than {_bytes_text(owners[st.st_uid])}"
    return ""


def _read_at_most(fd: int, limit: int) -> bytes:
    # The size was checked, but a file can still grow: never more than the limit.
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _dir_open(*, dir_fd: int, name: str) -> int | str | None:
    """A descriptor of the directory `name`, or why it is not one (None: there is no such name)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        # O_NOFOLLOW|O_DIRECTORY on a link fails with ENOTDIR or ELOOP: the lstat says which it was.
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return "symbolic link"
        return "not a directory" if not stat.S_ISDIR(st.st_mode) else _open_refusal(error)


def _open_refusal(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "symbolic link"
    return f"cannot be opened ({os.strerror(error.errno or 0)})"


def _bytes_text(count: int) -> str:
    if count % (1024 * 1024) == 0:
        return f"{count // (1024 * 1024)} MB"
    return f"{count} bytes"
