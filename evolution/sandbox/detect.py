"""Which isolation really works on this machine (probed once, cached), and the runner for a wanted level."""

import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from evolution.errors import SandboxUnavailable
from evolution.sandbox.runners import BwrapRunner, DockerRunner, SubprocessRunner
from evolution.sandbox.types import IsolationLevel, Limits, SandboxRunner

PROBE_TIMEOUT_S = 20.0
HOW_TO_GET = {
    IsolationLevel.BWRAP: "install bubblewrap (`apt-get install bubblewrap`; scripts/install.sh --dev does it) on a "
    "kernel that allows namespaces",
    IsolationLevel.DOCKER: "install Docker and make `docker info` answer for the worker's user",
}

_lock = threading.Lock()
_available: dict[IsolationLevel, str] | None = None  # level -> "" when it works, else why not


def _probe_bwrap() -> str:
    if not shutil.which("bwrap"):
        return "the bwrap binary is not on PATH"
    # A real run with the runner's own flags: a binary that cannot create namespaces here is no sandbox.
    with tempfile.TemporaryDirectory(prefix="clear-sandbox-probe-") as workdir:
        result = BwrapRunner().run(
            cmd=[sys.executable, "-c", "print('sandbox-ok')"], workdir=Path(workdir),
            limits=Limits(wall_s=PROBE_TIMEOUT_S),
        )
    if result.exit_code == 0 and result.stdout.strip() == "sandbox-ok":
        return ""
    return f"a probe run failed (exit {result.exit_code}, timed out {result.timed_out}): {result.stderr.strip()[:500]}"


def _probe_docker() -> str:
    docker = shutil.which("docker")
    if not docker:
        return "the docker binary is not on PATH"
    try:
        answer = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                                timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer"
    if answer.returncode != 0:
        return f"`docker info` failed: {answer.stderr.strip()[:500]}"
    return ""


def _availability(*, refresh: bool = False) -> dict[IsolationLevel, str]:
    global _available
    with _lock:
        if _available is None or refresh:
            _available = {
                IsolationLevel.SUBPROCESS: "",
                IsolationLevel.BWRAP: _probe_bwrap(),
                IsolationLevel.DOCKER: _probe_docker(),
            }
        return dict(_available)


def sandbox_problems(*, refresh: bool = False) -> dict[IsolationLevel, str]:
    """Why each level does not work here ("" for the ones that do); for the admin view and error messages."""
    return _availability(refresh=refresh)


def sandbox_detect(*, refresh: bool = False) -> IsolationLevel:
    available = _availability(refresh=refresh)
    return max((level for level, problem in available.items() if not problem), key=lambda level: level.rank)


def _level_parse(value: IsolationLevel | str, *, what: str) -> IsolationLevel:
    try:
        return IsolationLevel(value)
    except ValueError:
        choices = ", ".join(level.value for level in IsolationLevel)
        raise SandboxUnavailable(f"{what} {value!r} is not a sandbox level; use one of {choices}") from None


def _configured_min() -> IsolationLevel:
    from django.conf import settings

    return _level_parse(settings.CLEAR_EVOLUTION_MIN_SANDBOX, what="CLEAR_EVOLUTION_MIN_SANDBOX")


def sandbox_min_level() -> IsolationLevel:
    """The weakest isolation this server lets candidate code run under (CLEAR_EVOLUTION_MIN_SANDBOX)."""
    return _configured_min()


def sandbox_levels_allowed(*, levels: list[str]) -> list[str]:
    """A target's levels without those below the server's minimum (and without unknown names), in its order."""
    floor = _configured_min()
    allowed = []
    for level in levels:
        try:
            parsed = IsolationLevel(level)
        except ValueError:
            continue
        if parsed.rank >= floor.rank:
            allowed.append(parsed.value)
    return allowed


def _runner(level: IsolationLevel) -> SandboxRunner:
    if level == IsolationLevel.DOCKER:
        from django.conf import settings

        return DockerRunner(image=settings.CLEAR_EVOLUTION_DOCKER_IMAGE)
    if level == IsolationLevel.BWRAP:
        return BwrapRunner()
    return SubprocessRunner()


def sandbox_runner_get(
    *, level: IsolationLevel | str | None = None, min_level: IsolationLevel | str | None = None
) -> SandboxRunner:
    """The runner for `level` (default: the best detected), refused below min_level or the configured minimum."""
    floor = _configured_min()
    if min_level is not None:
        floor = max(floor, _level_parse(min_level, what="min_level"), key=lambda lv: lv.rank)
    available = _availability()
    chosen = sandbox_detect() if level is None else _level_parse(level, what="level")
    if available[chosen]:
        raise SandboxUnavailable(
            f"Sandbox level {chosen} is not available here: {available[chosen]}. To get it, {HOW_TO_GET[chosen]}.",
            extra={"level": chosen.value},
        )
    if chosen.rank < floor.rank:
        missing = [lv for lv in IsolationLevel if lv.rank >= floor.rank and available[lv]]
        hints = "; ".join(f"{lv}: {available[lv]} (to get it, {HOW_TO_GET[lv]})" for lv in missing)
        raise SandboxUnavailable(
            f"Sandbox level {chosen} is below the required minimum {floor}. {hints or ''}".strip(),
            extra={"level": chosen.value, "min_level": floor.value},
        )
    return _runner(chosen)
