"""What a contained run sees and who it runs as: the system files it needs, the paths of the server it must not see,
and the unprivileged host user a root worker hands the run to.

Modelled on the sandboxes that contain hostile code on Linux (Flatpak, Firejail, the Codex CLI): nothing of the host's
root is bound; only /usr (and the top-level links into it), a few files of /etc that programs read at start, the
interpreter, and the paths a run names are visible.
"""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass
from pathlib import Path

from evolution.errors import SandboxUnavailable

# Files of /etc that dynamic linking, name lookups of the local user and host, TLS and time zones read; no secrets
# (/etc/shadow, /etc/ssh, credentials) among them.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
             "ca-certificates.conf", "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "localtime",
             "timezone", "mime.types")
TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Fresh, empty and private in every run: where programs keep runtime sockets, homes and temporary files.
PRIVATE_TMPFS = ("/run", "/var/run", "/home")
TMP_SIZE_BYTES = 1024**3


@dataclass(frozen=True)
class SandboxIdentity:
    """The host uid and gid a sandboxed process runs as when the worker is root (None: the worker's own, non-root)."""

    uid: int
    gid: int
    name: str


def sandbox_identity() -> SandboxIdentity | None:
    """None when the worker is not root (its own uid is already unprivileged); the sandbox user otherwise.

    Root inside a sandbox is root on the host for every file the sandbox can reach, so a root worker must hand the
    run to a user of its own; without one the sandbox is unavailable rather than silently root.
    """
    if os.geteuid() != 0:
        return None
    name = _sandbox_user_name()
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SandboxUnavailable(
            f"the worker runs as root and the sandbox user {name!r} does not exist: create it (scripts/install.sh "
            f"does: useradd --system --no-create-home --shell /usr/sbin/nologin {name}) or set "
            "CLEAR_EVOLUTION_SANDBOX_USER to an unprivileged user", extra={"user": name}) from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise SandboxUnavailable(f"the sandbox user {name!r} is uid or gid 0; it must be an unprivileged user",
                                 extra={"user": name})
    return SandboxIdentity(uid=entry.pw_uid, gid=entry.pw_gid, name=name)


def _sandbox_user_name() -> str:
    try:
        from django.conf import settings

        return settings.CLEAR_EVOLUTION_SANDBOX_USER
    except Exception:  # noqa: BLE001 - outside Django (a probe from a script) the documented default applies
        return "clear-sandbox"


def sandbox_nproc_default() -> int:
    try:
        from django.conf import settings

        return int(settings.CLEAR_EVOLUTION_SANDBOX_NPROC)
    except Exception:  # noqa: BLE001
        return 256


def interpreter_dirs() -> list[Path]:
    """What Clear's interpreter needs to start: the venv and the Python installation it points at."""
    dirs = [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent]
    unique: list[Path] = []
    for path in dirs:
        if path.is_dir() and path not in unique:
            unique.append(path)
    return unique


def server_secret_paths() -> list[Path]:
    """Directories and files of the server a run must not see even when a path it names lies around or inside them.

    The var dir holds the secret key and credentials, the evolution dir the mirrors, pinned graders and other jobs;
    `*_FILE` variables name secret files (Docker-secrets style) wherever they live. What a run needs from there
    (its workdir, rw_paths, ro_paths) is bound back on top.
    """
    paths: list[Path] = []
    try:
        from django.conf import settings

        paths.append(Path(settings.VAR_DIR))
        if getattr(settings, "CLEAR_EVOLUTION_DIR", None):
            paths.append(Path(settings.CLEAR_EVOLUTION_DIR))
    except Exception:  # noqa: BLE001 - without configured settings there is nothing of Django's to hide
        pass
    for name, value in os.environ.items():
        if name.endswith("_FILE") and value.startswith("/"):
            paths.append(Path(value))
    return [path for path in paths if path.exists()]


def system_binds() -> tuple[list[tuple[str, str]], list[Path]]:
    """(top-level links as (target, link)), read-only system paths): /usr, /etc's harmless files, /bin and friends."""
    links: list[tuple[str, str]] = []
    paths = [Path("/usr")]
    for name in TOP_LEVEL_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            links.append((os.readlink(path), str(path)))
        elif path.is_dir():
            paths.append(path)
    paths += [Path("/etc") / name for name in ETC_FILES if (Path("/etc") / name).exists()]
    return links, paths


def tree_hand_over(*, paths: list[Path], identity: SandboxIdentity) -> None:
    """Give the run's writable trees to the sandbox user, so it can write there and nowhere else on the host.

    The orchestrator (root) keeps full access; git is told these trees are safe (evolution/git.py).
    """
    for root in paths:
        root = Path(root)
        if not root.exists():
            continue
        _own(root, identity)
        if root.is_symlink() or not root.is_dir():
            continue
        # bwrap enters the workdir after dropping its capabilities, as root without DAC override: the tree's top
        # must be traversable by others (a mkdtemp dir is 0700).
        root.chmod(root.stat().st_mode | 0o711)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                _own(Path(dirpath) / name, identity)


def _own(path: Path, identity: SandboxIdentity) -> None:
    try:
        st = path.lstat()
        if st.st_uid != identity.uid or st.st_gid != identity.gid:
            os.lchown(path, identity.uid, identity.gid)
    except FileNotFoundError:
        pass
