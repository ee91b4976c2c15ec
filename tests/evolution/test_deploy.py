"""Hot-swap deploys (evolution/deploy): releases, atomic swap, state.json, probes, activators, promote/rollback.

The probe window runs on a fake clock (a 90 s window takes milliseconds); processes, health commands, git and the
filesystem are real. Every test ends with no process left whose working directory is inside its tmp dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evolution.deploy import (
    ActivatorError,
    CommandOutcome,
    CommandProbe,
    DeployBusy,
    DeployInvalid,
    DeployStateCorrupt,
    HeartbeatFileProbe,
    HttpProbe,
    KubernetesActivator,
    ProbeResult,
    ProcessActivator,
    ProcessAliveProbe,
    PromotionOutcome,
    PromotionReason,
    ReleaseExists,
    StageFailed,
    SystemdActivator,
    health_watch,
    hot_swap_config_validate,
    hot_swap_promote,
    hot_swap_recover,
    hot_swap_rollback,
    release_current_get,
    release_gc,
    release_lock,
    release_mark_healthy,
    release_preflight,
    release_promotion_begin,
    release_stage,
    release_state_get,
    release_swap,
    sandbox_command_runner,
    subprocess_command_runner,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

AGENT = """\
import os, pathlib, time
beat = os.environ.get("HEARTBEAT")
while True:
    if beat:
        pathlib.Path(beat).write_text(str(os.getpid()))
    time.sleep(0.2)
"""
# Healthy unless a BROKEN file sits in the release (a bad release ships one; a test drops one into a good release
# to simulate a dependency that broke under it).
HEALTH = "import pathlib, sys\nsys.exit(1 if pathlib.Path('BROKEN').exists() else 0)\n"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class RecordingActivator:
    def __init__(self, fail_for: Sequence[str] = ()) -> None:
        self.reloads: list[str] = []
        self.fail_for = set(fail_for)
        self.stopped = False

    def reload(self, *, release_dir: Path) -> None:
        self.reloads.append(Path(release_dir).name)
        if Path(release_dir).name in self.fail_for:
            raise ActivatorError(f"{Path(release_dir).name} would not start")

    def alive(self) -> bool:
        return bool(self.reloads)

    def stop(self) -> None:
        self.stopped = True


class ScriptedProbe:
    """Answers from a list (True/False/Exception), then keeps answering the last value."""

    def __init__(self, answers: Sequence[object], name: str = "scripted", clock: FakeClock | None = None,
                 cost_s: float = 0.0) -> None:
        self.answers = list(answers)
        self.name = name
        self.calls = 0
        self.clock = clock
        self.cost_s = cost_s

    def check(self) -> ProbeResult:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.cost_s
        if isinstance(answer, Exception):
            raise answer
        return ProbeResult(name=self.name, ok=bool(answer), detail="ok" if answer else "down")


class FakeRunner:
    """Records every argv; `fail(argv, cwd) -> CommandOutcome | None` simulates failures."""

    def __init__(self, fail: Callable[[tuple[str, ...]], CommandOutcome | None] | None = None,
                 stdout: Callable[[tuple[str, ...]], str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.stdout = stdout

    def __call__(self, argv, *, cwd, timeout_s, env=None) -> CommandOutcome:
        argv = tuple(argv)
        self.calls.append(list(argv))
        failure = self.fail(argv) if self.fail else None
        if failure is not None:
            return failure
        return CommandOutcome(argv=argv, exit_code=0, stdout=self.stdout(argv) if self.stdout else "")


def failed(argv: tuple[str, ...], stderr: str) -> CommandOutcome:
    return CommandOutcome(argv=argv, exit_code=1, stderr=stderr)


def make_source(base: Path, name: str, *, broken: bool = False) -> Path:
    source = base / "sources" / name
    source.mkdir(parents=True)
    (source / "VERSION").write_text(name)
    (source / "agent.py").write_text(AGENT)
    (source / "health.py").write_text(HEALTH)
    if broken:
        (source / "BROKEN").write_text("this release fails its health command\n")
    return source


def health_probe(root: Path) -> CommandProbe:
    return CommandProbe(command="python health.py", cwd=root / "current", timeout_s=30)


def pid_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def processes_with_cwd_under(base: Path) -> list[int]:
    found = []
    base = base.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if (cwd == base or base in cwd.parents) and pid_running(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "deploy"


@pytest.fixture
def activators(tmp_path: Path):
    started: list[ProcessActivator] = []

    def make(**kwargs) -> ProcessActivator:
        activator = ProcessActivator(**{"command": "python agent.py", "log_path": tmp_path / "agent.log", **kwargs})
        started.append(activator)
        return activator

    yield make
    for activator in started:
        activator.stop()
    leftovers = processes_with_cwd_under(tmp_path)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert leftovers == [], "processes outlived the test"


def promote(root: Path, release_id: str, source: Path, activator, probes, clock: FakeClock, **kwargs):
    # A 20 s window (5 rounds) keeps the many failing health commands cheap; scenario 9 runs the full 90 s.
    kwargs.setdefault("window_s", 20)
    return hot_swap_promote(releases_root=root, release_id=release_id, source_dir=source, activator=activator,
                            probes=probes, sleep=clock.sleep, clock=clock.monotonic, **kwargs)


# --- releases: stage, swap, state --------------------------------------------------------------------------------


def test_stage_copies_a_tree_without_git_and_exports_a_commit(tmp_path, root):
    source = make_source(tmp_path, "v1")
    (source / ".git").mkdir()
    (source / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    staged = release_stage(releases_root=root, release_id="r1", source_dir=source)
    assert staged == root / "releases" / "r1"
    assert (staged / "VERSION").read_text() == "v1" and not (staged / ".git").exists()
    # The same source again under the same id is a retried task: same directory, no error.
    assert release_stage(releases_root=root, release_id="r1", source_dir=source) == staged
    with pytest.raises(ReleaseExists):
        release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "other"))

    repo = tmp_path / "repo"
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / "app.py").write_text("VERSION = 1\n")
    subprocess.run([*git, "add", "-A"], check=True, env=env)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True, env=env)
    first = subprocess.run([*git, "rev-parse", "HEAD"], check=True, env=env, capture_output=True, text=True)
    (repo / "app.py").write_text("VERSION = 2\n")
    (repo / "uncommitted.txt").write_text("not in the commit")
    exported = release_stage(releases_root=root, release_id="r2", repo_path=repo, commit=first.stdout.strip())
    assert (exported / "app.py").read_text() == "VERSION = 1\n"
    assert not (exported / ".git").exists() and not (exported / "uncommitted.txt").exists()
    assert release_state_get(releases_root=root).releases["r2"].commit == first.stdout.strip()
    release_stage(releases_root=root, release_id="r4", repo_path=repo, commit="HEAD")
    assert release_state_get(releases_root=root).releases["r4"].commit == first.stdout.strip()  # resolved

    with pytest.raises(StageFailed, match="r3"):
        release_stage(releases_root=root, release_id="r3", repo_path=repo, commit="0" * 40)
    assert sorted(p.name for p in (root / "releases").iterdir()) == ["r1", "r2", "r4"]  # no half-staged leftovers


@pytest.mark.parametrize("release_id", ["", "../escape", ".hidden", "a/b", "x" * 129, "white space"])
def test_release_ids_must_be_plain_directory_names(tmp_path, root, release_id):
    with pytest.raises(DeployInvalid, match="Release id"):
        release_stage(releases_root=root, release_id=release_id, source_dir=make_source(tmp_path, "v1"))


def test_stage_needs_exactly_one_source(tmp_path, root):
    with pytest.raises(DeployInvalid, match="either source_dir or repo_path"):
        release_stage(releases_root=root, release_id="r1")
    with pytest.raises(DeployInvalid, match="needs the commit"):
        release_stage(releases_root=root, release_id="r1", repo_path=tmp_path)
    with pytest.raises(DeployInvalid, match="not a directory"):
        release_stage(releases_root=root, release_id="r1", source_dir=tmp_path / "missing")


# A separate process, not a thread: under the GIL a reader thread almost never runs between the unlink and the
# symlink of a non-atomic swap, while a process on the other core sees hundreds of misses against `ln -sfn`.
ATOMIC_READER = """\
import pathlib, sys
root = pathlib.Path(sys.argv[1])
reads, misses, seen = 0, 0, set()
print("ready", flush=True)
while not (root / "STOP").exists():
    try:
        seen.add((root / "current" / "VERSION").read_text())
        reads += 1
    except OSError:
        misses += 1
print(reads, misses, ",".join(sorted(seen)))
"""


def test_symlink_swap_is_atomic_for_a_concurrent_reader(tmp_path, root):
    for name in ("r1", "r2"):
        release_stage(releases_root=root, release_id=name, source_dir=make_source(tmp_path, name))
    release_swap(releases_root=root, release_id="r1", reason="initial")
    reader = subprocess.Popen([sys.executable, "-c", ATOMIC_READER, str(root)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert reader.stdout.readline() == "ready\n"
        for index in range(200):
            release_swap(releases_root=root, release_id="r2" if index % 2 == 0 else "r1", reason=f"swap {index}")
    finally:
        (root / "STOP").write_text("")
        output, _ = reader.communicate(timeout=60)
    reads, misses, seen = output.split()
    assert int(misses) == 0 and int(reads) > 0 and set(seen.split(",")) <= {"r1", "r2"}
    assert release_current_get(releases_root=root) == "r1"
    assert os.readlink(root / "current") == "releases/r1"  # relative: the root can move
    state = release_state_get(releases_root=root)
    assert state.active == "r1" and len(state.history) == 201
    assert state.last_good is None  # swapping alone never vouches for a release
    assert [p.name for p in root.iterdir() if ".tmp-" in p.name] == []


def test_state_json_write_is_all_or_nothing(tmp_path, root, monkeypatch):
    for name in ("r1", "r2"):
        release_stage(releases_root=root, release_id=name, source_dir=make_source(tmp_path, name))
    release_swap(releases_root=root, release_id="r1", reason="initial")
    release_mark_healthy(releases_root=root, release_id="r1")
    before = (root / "state.json").read_text()

    import evolution.deploy.state as state_module

    real_replace = os.replace

    def crash_on_state(src, dst):
        if str(dst).endswith("state.json"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(state_module.os, "replace", crash_on_state)
    with pytest.raises(OSError, match="No space"):
        release_mark_healthy(releases_root=root, release_id="r2")
    monkeypatch.undo()
    assert (root / "state.json").read_text() == before
    assert release_state_get(releases_root=root).last_good == "r1"
    assert [p.name for p in root.iterdir() if ".tmp-" in p.name] == []


def test_corrupt_state_json_is_reported_with_the_fix(tmp_path, root):
    release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "v1"))
    (root / "state.json").write_text("{not json")
    with pytest.raises(DeployStateCorrupt, match="state.json cannot be read.*delete it"):
        release_state_get(releases_root=root)


CRASHING_PROMOTER = """\
import os, sys, time, pathlib
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clear.settings.test")
import django
django.setup()
from evolution.deploy import ProbeResult, hot_swap_promote

root, source, marker = map(pathlib.Path, sys.argv[1:4])

class Noop:
    def reload(self, *, release_dir): pass
    def alive(self): return True
    def stop(self): pass

class Hang:
    name = "hangs"
    def check(self):
        marker.write_text("probing")
        time.sleep(120)
        return ProbeResult(name=self.name, ok=True)

hot_swap_promote(releases_root=root, release_id="r2", source_dir=source, activator=Noop(), probes=[Hang()])
"""


def test_state_survives_a_promoter_killed_mid_window_and_recovery_rolls_back(tmp_path, root, clock):
    activator = RecordingActivator()
    first = promote(root, "r1", make_source(tmp_path, "r1"), activator, [health_probe(root)], clock)
    assert first.outcome == PromotionOutcome.PROMOTED
    script = tmp_path / "promoter.py"
    script.write_text(CRASHING_PROMOTER)
    marker = tmp_path / "probing"
    child = subprocess.Popen(
        [sys.executable, str(script), str(root), str(make_source(tmp_path, "r2")), str(marker)],
        cwd=REPO_ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), child.stdout.read().decode() if child.poll() is not None else "promoter stuck"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()

    state = release_state_get(releases_root=root)  # still valid JSON
    assert state.last_good == "r1"
    assert state.pending is not None and state.pending.release_id == "r2" and state.pending.rollback_to == "r1"
    assert release_current_get(releases_root=root) == "r2"
    with pytest.raises(DeployBusy, match="never finished"):
        release_promotion_begin(releases_root=root, release_id="r3")

    recovered = hot_swap_recover(releases_root=root, activator=activator, probes=[health_probe(root)],
                                 sleep=clock.sleep, clock=clock.monotonic)
    assert recovered.outcome == PromotionOutcome.ROLLED_BACK and recovered.reason == PromotionReason.RECOVERED
    assert release_current_get(releases_root=root) == "r1" and activator.reloads == ["r1", "r1"]
    state = release_state_get(releases_root=root)
    assert state.pending is None and state.last_good == "r1" and state.releases["r2"].status == "unhealthy"
    assert hot_swap_recover(releases_root=root, activator=activator, probes=[health_probe(root)]) is None


class SimulatedCrash(BaseException):
    """Not an Exception: nothing in the library may catch it, as nothing survives a SIGKILL."""


def _crash_after(real):
    def wrapper(*args, **kwargs):
        real(*args, **kwargs)
        raise SimulatedCrash(real.__name__)

    return wrapper


def _crash_instead(real):
    def wrapper(*args, **kwargs):
        raise SimulatedCrash(real.__name__)

    return wrapper


CRASH_POINTS = {
    # module attribute patched -> how; the promotion of r2 dies there
    "before the swap": ("evolution.deploy.promote.release_swap", _crash_instead),
    "between symlink and state.json": ("evolution.deploy.releases.symlink_replace_atomic", _crash_after),
    "in the reload": ("evolution.deploy.promote._reload_and_watch", _crash_instead),
    "before the healthy mark": ("evolution.deploy.promote.release_mark_healthy", _crash_instead),
    "in the swap back": ("evolution.deploy.promote.release_rollback", _crash_after),
}


@pytest.mark.parametrize("point, broken", [
    *[(point, False) for point in CRASH_POINTS if point != "in the swap back"],  # a healthy r2 is never swapped back
    *[(point, True) for point in CRASH_POINTS if point != "before the healthy mark"],  # a broken one never marked
])
def test_a_crash_between_any_two_steps_keeps_last_good_and_recovers(tmp_path, root, clock, monkeypatch, point,
                                                                      broken):
    activator = RecordingActivator()
    probes = [health_probe(root)]
    assert promote(root, "r1", make_source(tmp_path, "r1"), activator, probes, clock).outcome == "promoted"
    target, how = CRASH_POINTS[point]
    module_name, attribute = target.rsplit(".", 1)
    module = sys.modules[module_name]
    monkeypatch.setattr(module, attribute, how(getattr(module, attribute)))
    with pytest.raises(SimulatedCrash):
        promote(root, "r2", make_source(tmp_path, "r2", broken=broken), activator, probes, clock)
    monkeypatch.undo()

    state = release_state_get(releases_root=root)
    assert state.last_good == "r1"
    if state.pending is not None:
        assert state.pending.release_id == "r2" and state.pending.rollback_to == "r1"
        recovered = hot_swap_recover(releases_root=root, activator=activator, probes=probes, sleep=clock.sleep,
                                     clock=clock.monotonic)
        assert recovered.outcome == PromotionOutcome.ROLLED_BACK
    assert release_current_get(releases_root=root) == "r1"
    state = release_state_get(releases_root=root)
    assert state.pending is None and state.last_good == "r1" and state.active == "r1"


def test_promoting_the_same_release_again_after_a_crash_keeps_the_recorded_fallback(tmp_path, root, clock,
                                                                                   monkeypatch):
    activator = RecordingActivator()
    probes = [health_probe(root)]
    assert promote(root, "r1", make_source(tmp_path, "r1"), activator, probes, clock).outcome == "promoted"
    import evolution.deploy.promote as promote_module

    monkeypatch.setattr(promote_module, "_reload_and_watch", _crash_instead(promote_module._reload_and_watch))
    source = make_source(tmp_path, "r2", broken=True)
    with pytest.raises(SimulatedCrash):
        promote(root, "r2", source, activator, probes, clock)
    monkeypatch.undo()
    assert release_current_get(releases_root=root) == "r2"  # swapped before the crash
    retried = promote(root, "r2", source, activator, probes, clock)  # the task is retried
    assert retried.outcome == PromotionOutcome.ROLLED_BACK and retried.rollback_to == "r1"
    assert release_current_get(releases_root=root) == "r1"


def test_lock_keeps_a_second_deployer_out(tmp_path, root):
    release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "v1"))
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with release_lock(root):
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(30)
        with pytest.raises(DeployBusy, match="Another deploy"):
            release_swap(releases_root=root, release_id="r1", reason="while busy")
    finally:
        release.set()
        thread.join()
    release_swap(releases_root=root, release_id="r1", reason="after")
    assert release_current_get(releases_root=root) == "r1"


def test_gc_keeps_the_newest_the_current_and_the_last_good(tmp_path, root):
    for index in range(1, 8):
        release_stage(releases_root=root, release_id=f"r{index}", source_dir=make_source(tmp_path, f"r{index}"))
    release_swap(releases_root=root, release_id="r2", reason="good one")
    release_mark_healthy(releases_root=root, release_id="r2")
    release_swap(releases_root=root, release_id="r3", reason="on probation")
    (root / "releases" / ".staging-r9-dead").mkdir()  # left by a stager that died
    assert release_gc(releases_root=root, keep=2) == ["r1", "r4", "r5"]
    assert sorted(p.name for p in (root / "releases").iterdir()) == ["r2", "r3", "r6", "r7"]
    assert sorted(release_state_get(releases_root=root).releases) == ["r2", "r3", "r6", "r7"]
    with pytest.raises(DeployInvalid, match="keep"):
        release_gc(releases_root=root, keep=0)


# --- preflight --------------------------------------------------------------------------------------------------


def test_preflight_failure_swaps_nothing(tmp_path, root, clock):
    activator = RecordingActivator()
    first = promote(root, "r1", make_source(tmp_path, "r1"), activator, [health_probe(root)], clock)
    assert first.outcome == "promoted"
    history = release_state_get(releases_root=root).history
    result = promote(
        root, "r2", make_source(tmp_path, "r2"), activator, [health_probe(root)], clock,
        preflight_commands=["python -c 'import agent_that_does_not_exist'", "python -c 'print(1)'"],
    )
    assert result.outcome == PromotionOutcome.FAILED and result.reason == PromotionReason.PREFLIGHT_FAILED
    assert "agent_that_does_not_exist" in result.detail
    assert len(result.preflight.results) == 1  # stopped at the first failure
    assert result.swaps == () and result.active_release == "r1"
    assert release_current_get(releases_root=root) == "r1" and activator.reloads == ["r1"]
    state = release_state_get(releases_root=root)
    assert state.history == history and state.last_good == "r1" and state.pending is None
    assert state.releases["r2"].status == "preflight_failed"


def test_preflight_runs_in_the_release_with_placeholders(tmp_path, root):
    release = release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "v1"))
    report = release_preflight(
        release_dir=release,
        commands=["python -c \"import pathlib; assert pathlib.Path('VERSION').read_text() == 'v1'\"",
                  ["python", "-c", "import sys; assert sys.argv[1].endswith('r1')", "{release_dir}"]],
    )
    assert report.ok and len(report.results) == 2
    with pytest.raises(DeployInvalid, match="unknown placeholder"):
        release_preflight(release_dir=release, commands=["python {nope}"])


def test_preflight_through_a_sandbox_runner(tmp_path, root):
    from evolution.sandbox import IsolationLevel, Limits, ProcResult

    class FakeSandbox:
        level = IsolationLevel.SUBPROCESS

        def __init__(self) -> None:
            self.calls: list[dict] = []

        def run(self, **kwargs) -> ProcResult:
            self.calls.append(kwargs)
            return ProcResult(exit_code=2, signal=None, timed_out=False, cancelled=False, stdout="",
                              stderr="ImportError: agent", truncated=False, duration_s=0.1,
                              isolation_level=self.level)

    sandbox = FakeSandbox()
    release = release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "v1"))
    report = release_preflight(release_dir=release, commands=["python -c 'import agent'"],
                               runner=sandbox_command_runner(sandbox, limits=Limits(memory_bytes=None)),
                               timeout_s=7)
    assert not report.ok and "ImportError: agent" in report.summary()
    call = sandbox.calls[0]
    assert call["cmd"] == ["python", "-c", "import agent"] and call["workdir"] == release
    assert call["limits"].wall_s == 7 and call["limits"].memory_bytes is None and "egress" not in call


def test_preflight_in_the_real_sandbox(tmp_path, root):
    from evolution.sandbox import sandbox_runner_get

    release = release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "v1"))
    runner = sandbox_command_runner(sandbox_runner_get())
    assert release_preflight(release_dir=release, commands=["python health.py"], runner=runner).ok
    report = release_preflight(release_dir=release, commands=["python -c 'import agent_missing'"], runner=runner)
    assert not report.ok and "ModuleNotFoundError" in report.summary()


# --- health window ----------------------------------------------------------------------------------------------


def test_health_needs_consecutive_passes_and_a_failure_resets_the_streak(clock):
    probe = ScriptedProbe([False, True, True, False, True, True, True, False])
    report = health_watch(probes=[probe], sleep=clock.sleep, clock=clock.monotonic)
    assert report.healthy and report.reason == "healthy" and report.streak == 3
    assert [r.offset_s for r in report.rounds] == [0, 5, 10, 15, 20, 25, 30]
    assert [r.report.ok for r in report.rounds] == [False, True, True, False, True, True, True]
    assert len(report.results) == 7


def test_health_window_runs_out(clock):
    probe = ScriptedProbe([True, True, False])
    report = health_watch(probes=[probe, ScriptedProbe([True])], sleep=clock.sleep, clock=clock.monotonic)
    assert not report.healthy and report.reason == "window_exhausted"
    assert len(report.rounds) == 19 and report.rounds[-1].offset_s == 90  # rounds at 0, 5, ..., 90
    assert len(report.results) == 38 and "scripted: down" in report.summary()


def test_health_probe_errors_count_as_failures_and_cancel_stops(clock):
    report = health_watch(probes=[ScriptedProbe([RuntimeError("boom"), True])], passes_required=2,
                          sleep=clock.sleep, clock=clock.monotonic)
    assert report.healthy and "probe raised RuntimeError: boom" in report.rounds[0].report.results[0].detail
    calls = iter([False, False, True])
    report = health_watch(probes=[ScriptedProbe([False])], sleep=clock.sleep, clock=clock.monotonic,
                          should_stop=lambda: next(calls))
    assert report.reason == "cancelled" and len(report.rounds) == 2


def test_slow_probes_skip_grid_points_instead_of_running_back_to_back(clock):
    probe = ScriptedProbe([False], clock=clock, cost_s=7)
    report = health_watch(probes=[probe], interval_s=5, window_s=30, passes_required=1, sleep=clock.sleep,
                          clock=clock.monotonic)
    assert [r.offset_s for r in report.rounds] == [7, 17, 27, 37]  # started at 0, 10, 20, 30
    assert all(s > 0 for s in clock.sleeps)


@pytest.mark.parametrize("kwargs, message", [
    ({"interval_s": 0}, "interval_s"), ({"window_s": -1}, "window_s"), ({"passes_required": 0}, "passes_required"),
    ({"interval_s": 50, "passes_required": 3}, "cannot fit"),
])
def test_health_params_are_checked(kwargs, message):
    with pytest.raises(DeployInvalid, match=message):
        health_watch(probes=[ScriptedProbe([True])], **kwargs)
    with pytest.raises(DeployInvalid, match="at least one probe"):
        health_watch(probes=[])


# --- probes -----------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        status = {"/health": 200, "/sick": 503, "/moved": 302}.get(self.path, 404)
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/health")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_http_probe():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert HttpProbe(url=f"{base}/health").check().ok
        sick = HttpProbe(url=f"{base}/sick").check()
        assert not sick.ok and sick.detail == "HTTP 503"
        assert HttpProbe(url=f"{base}/moved").check().detail == "HTTP 302"  # redirects are not followed
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    refused = HttpProbe(url=f"{base}/health", timeout_s=2).check()
    assert not refused.ok and "failed" in refused.detail
    with pytest.raises(DeployInvalid, match="http://"):
        HttpProbe(url="localhost:8000/health")


def test_heartbeat_probe(tmp_path):
    beat = tmp_path / "heartbeat"
    now = [1_000_000.0]
    probe = HeartbeatFileProbe(path=beat, max_age_s=30, now=lambda: now[0])
    assert "does not exist" in probe.check().detail
    beat.write_text("x")
    os.utime(beat, (now[0] - 10, now[0] - 10))
    assert probe.check().ok
    os.utime(beat, (now[0] - 31, now[0] - 31))
    stale = probe.check()
    assert not stale.ok and "31.0s old" in stale.detail


def test_command_probe_times_out_and_leaves_no_helper_behind(tmp_path):
    slow = CommandProbe(command=["python", "-c", "import time; time.sleep(60)"], timeout_s=0.5).check()
    assert not slow.ok and "timed out" in slow.detail
    spawner = "import subprocess; p = subprocess.Popen(['sleep', '300']); print(p.pid)"
    outcome = subprocess_command_runner(["python", "-c", spawner], cwd=tmp_path, timeout_s=30)
    assert outcome.ok and not pid_running(int(outcome.stdout))
    missing = CommandProbe(command="no-such-program-xyz --health").check()
    assert not missing.ok and "cannot start" in missing.detail


# --- activators -------------------------------------------------------------------------------------------------


def test_process_activator_restarts_from_the_release_and_kills_the_old_group(tmp_path, root, activators):
    one = release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "r1"))
    two = release_stage(releases_root=root, release_id="r2", source_dir=make_source(tmp_path, "r2"))
    # The agent starts a helper and ignores SIGTERM: reload must still take the whole group down.
    (one / "agent.py").write_text(
        "import signal, subprocess, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen(['sleep', '300'])\nwhile True: time.sleep(1)\n"
    )
    activator = activators(stop_timeout_s=0.5)
    activator.reload(release_dir=one)
    first_pid = activator.pid
    assert activator.alive() and Path(os.readlink(f"/proc/{first_pid}/cwd")) == one
    deadline = time.monotonic() + 30
    while len(processes_with_cwd_under(one)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    group = processes_with_cwd_under(one)
    assert len(group) == 2  # the agent and its helper
    activator.reload(release_dir=two)
    assert activator.alive() and activator.pid != first_pid
    assert Path(os.readlink(f"/proc/{activator.pid}/cwd")) == two
    assert not any(pid_running(pid) for pid in group)
    activator.stop()
    assert not activator.alive() and processes_with_cwd_under(tmp_path) == []


def test_a_new_process_activator_adopts_the_recorded_agent(tmp_path, root, activators):
    one = release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "r1"))
    two = release_stage(releases_root=root, release_id="r2", source_dir=make_source(tmp_path, "r2"))
    pid_file = root / "agent.pid"
    first = activators(pid_file=pid_file)
    first.reload(release_dir=one)
    agent = first.pid
    # The next task builds its own activator: it sees the running agent, probes it, and replaces it.
    second = activators(pid_file=pid_file)
    assert second.alive() and second.pid == agent and second.process is None
    second.reload(release_dir=two)
    first.process.wait(timeout=30)  # killed by the second activator; reap it
    assert not pid_running(agent) and processes_with_cwd_under(one) == []
    assert json.loads(pid_file.read_text())["pid"] == second.pid != agent
    second.stop()
    assert not pid_file.exists() and not second.alive()
    # A recycled pid (same number, other start time) is never taken for the agent.
    pid_file.write_text(json.dumps({"pid": os.getpid(), "start": 1}))
    third = activators(pid_file=pid_file)
    assert not third.alive() and third.pid is None
    third.stop()  # and certainly not killed
    assert pid_running(os.getpid())


def test_process_activator_errors(tmp_path, root, activators):
    release = release_stage(releases_root=root, release_id="r1", source_dir=make_source(tmp_path, "r1"))
    with pytest.raises(ActivatorError, match="Cannot start"):
        activators(command="no-such-program-xyz").reload(release_dir=release)
    with pytest.raises(ActivatorError, match="does not exist"):
        activators().reload(release_dir=root / "releases" / "missing")
    with pytest.raises(DeployInvalid, match="empty"):
        ProcessActivator(command="")


def test_systemd_activator_against_a_fake_systemctl():
    runner = FakeRunner()
    SystemdActivator(unit="agent.service", runner=runner).reload(release_dir=Path("/srv/agent/releases/r1"))
    assert runner.calls == [["systemctl", "restart", "agent.service"], ["systemctl", "is-active", "agent.service"]]

    runner = FakeRunner(fail=lambda argv: failed(argv, "Job for agent.service failed") if "restart" in argv else None)
    with pytest.raises(ActivatorError, match="Restarting agent.service failed.*Job for agent.service failed"):
        SystemdActivator(unit="agent.service", runner=runner, user=True).reload(release_dir=Path("r1"))
    assert runner.calls == [["systemctl", "--user", "restart", "agent.service"]]

    runner = FakeRunner(fail=lambda argv: failed(argv, "failed") if "is-active" in argv else None)
    activator = SystemdActivator(unit="agent.service", runner=runner)
    with pytest.raises(ActivatorError, match="not active after the restart"):
        activator.reload(release_dir=Path("r1"))
    assert not activator.alive()
    activator.stop()
    assert runner.calls[-1] == ["systemctl", "stop", "agent.service"]
    with pytest.raises(DeployInvalid, match="unit name"):
        SystemdActivator(unit="two words")


def test_kubernetes_activator_against_a_fake_kubectl():
    runner = FakeRunner(stdout=lambda argv: "2" if "get" in argv else "")
    activator = KubernetesActivator(deployment="desk", container="agent", image="reg.example/desk:{release_id}",
                                    namespace="agents", context="prod", runner=runner, rollout_timeout_s=120)
    activator.reload(release_dir=Path("/srv/desk/releases/job-7-abc"))
    base = ["kubectl", "--context", "prod", "--namespace", "agents"]
    assert runner.calls == [
        [*base, "set", "image", "deployment/desk", "agent=reg.example/desk:job-7-abc"],
        [*base, "rollout", "status", "deployment/desk", "--timeout=120s"],
    ]
    assert activator.alive()

    runner = FakeRunner(fail=lambda argv: failed(argv, "exceeded its progress deadline") if "status" in argv else None)
    activator = KubernetesActivator(deployment="desk", container="agent", image="desk:{release_id}", runner=runner)
    with pytest.raises(ActivatorError, match="progress deadline.*rolled back with `kubectl rollout undo`"):
        activator.reload(release_dir=Path("r2"))
    assert [call[1:3] for call in runner.calls] == [["set", "image"], ["rollout", "status"], ["rollout", "undo"]]
    assert runner.calls[-1] == ["kubectl", "rollout", "undo", "deployment/desk"]
    assert not KubernetesActivator(deployment="desk", container="agent", image="desk:{release_id}",
                                   runner=FakeRunner(stdout=lambda argv: "")).alive()

    runner = FakeRunner(fail=lambda argv: failed(argv, "forbidden") if "set" in argv or "undo" in argv else None)
    with pytest.raises(ActivatorError, match="Setting image desk:r3 failed.*forbidden"):
        KubernetesActivator(deployment="desk", container="agent", image="desk:{release_id}",
                            runner=runner).reload(release_dir=Path("r3"))
    assert len(runner.calls) == 1
    with pytest.raises(DeployInvalid, match="release_id"):
        KubernetesActivator(deployment="desk", container="agent", image="desk:latest")


# --- the whole promotion ----------------------------------------------------------------------------------------


def test_scenario_9_unhealthy_release_is_rolled_back_and_the_reprobe_passes(tmp_path, root, clock, activators):
    activator = activators()
    probes = [health_probe(root), ProcessAliveProbe(target=activator)]
    first = promote(root, "r1", make_source(tmp_path, "r1"), activator, probes, clock, window_s=90)
    assert first.outcome == PromotionOutcome.PROMOTED and first.reason == PromotionReason.HEALTHY
    assert first.rollback_to is None and first.health.streak == 3
    first_pid = activator.pid

    result = promote(root, "r2", make_source(tmp_path, "r2", broken=True), activator, probes, clock,
                     reason="job 42", window_s=90)
    assert result.outcome == PromotionOutcome.ROLLED_BACK and result.reason == PromotionReason.HEALTH_FAILED
    assert result.rollback_to == "r1" and result.active_release == "r1"
    assert not result.health.healthy and len(result.health.rounds) == 19
    assert "exit 1" in result.health.rounds[0].report.results[0].detail
    assert result.rollback_health.healthy
    assert release_current_get(releases_root=root) == "r1"
    assert (root / "current" / "VERSION").read_text() == "r1"
    # The running agent is a fresh process of r1, and r2's process is gone.
    assert activator.alive() and activator.pid != first_pid
    assert Path(os.readlink(f"/proc/{activator.pid}/cwd")) == root / "releases" / "r1"
    assert processes_with_cwd_under(root / "releases" / "r2") == []
    state = release_state_get(releases_root=root)
    assert state.last_good == "r1" and state.active == "r1" and state.pending is None
    assert [(s.kind, s.from_release, s.to_release, s.health) for s in state.history] == [
        ("promote", None, "r1", "healthy"), ("promote", "r1", "r2", "unhealthy"), ("rollback", "r2", "r1", "healthy"),
    ]
    assert state.history[1].reason == "job 42" and "r2 unhealthy" in state.history[2].reason
    data = json.loads(json.dumps(result.to_dict()))
    assert data["outcome"] == "rolled_back" and data["health"]["rounds"][0]["results"][0]["ok"] is False


def test_a_rollback_that_fails_too_ends_failed_with_the_reason(tmp_path, root, clock, activators):
    activator = activators()
    probes = [health_probe(root), ProcessAliveProbe(target=activator)]
    assert promote(root, "r1", make_source(tmp_path, "r1"), activator, probes, clock).outcome == "promoted"
    (root / "releases" / "r1" / "BROKEN").write_text("a dependency broke under the running release\n")
    result = promote(root, "r2", make_source(tmp_path, "r2", broken=True), activator, probes, clock)
    assert result.outcome == PromotionOutcome.FAILED and result.reason == PromotionReason.ROLLBACK_UNHEALTHY
    assert "rolled back to r1, but it is unhealthy too" in result.detail
    assert not result.health.healthy and not result.rollback_health.healthy
    assert release_current_get(releases_root=root) == "r1"
    state = release_state_get(releases_root=root)
    assert state.pending is None and state.history[-1].health == "unhealthy"
    assert state.releases["r1"].status == "unhealthy" and state.releases["r2"].status == "unhealthy"


def test_first_release_with_no_fallback_fails_without_rollback(tmp_path, root, clock):
    activator = RecordingActivator()
    result = promote(root, "r1", make_source(tmp_path, "r1", broken=True), activator, [health_probe(root)], clock)
    assert result.outcome == PromotionOutcome.FAILED and result.reason == PromotionReason.NO_ROLLBACK_TARGET
    assert activator.reloads == ["r1"] and release_state_get(releases_root=root).pending is None


def test_reload_failure_rolls_back_through_systemd(tmp_path, root, clock):
    def fail(argv):
        if "restart" in argv and release_current_get(releases_root=root) == "r2":
            return failed(argv, "agent.service: Main process exited, code=exited, status=1/FAILURE")
        return None

    runner = FakeRunner(fail=fail)
    activator = SystemdActivator(unit="agent.service", runner=runner)
    probes = [health_probe(root), ProcessAliveProbe(target=activator)]
    assert promote(root, "r1", make_source(tmp_path, "r1"), activator, probes, clock).outcome == "promoted"
    runner.calls.clear()
    result = promote(root, "r2", make_source(tmp_path, "r2"), activator, probes, clock)
    assert result.outcome == PromotionOutcome.ROLLED_BACK and result.reason == PromotionReason.RELOAD_FAILED
    assert "status=1/FAILURE" in result.detail and result.health is None
    assert runner.calls[:2] == [["systemctl", "restart", "agent.service"]] * 2
    assert release_current_get(releases_root=root) == "r1"


def test_kubernetes_rollout_failure_undoes_and_rolls_back(tmp_path, root, clock):
    runner = FakeRunner(
        fail=lambda argv: failed(argv, "deadline exceeded") if "status" in argv and
        release_current_get(releases_root=root) == "r2" else None,
        stdout=lambda argv: "1" if "get" in argv else "",
    )
    activator = KubernetesActivator(deployment="desk", container="agent", image="desk:{release_id}", runner=runner)
    probes = [ProcessAliveProbe(target=activator)]
    assert promote(root, "r1", make_source(tmp_path, "r1"), activator, probes, clock).outcome == "promoted"
    runner.calls.clear()
    result = promote(root, "r2", make_source(tmp_path, "r2"), activator, probes, clock)
    assert result.outcome == PromotionOutcome.ROLLED_BACK and result.reason == PromotionReason.RELOAD_FAILED
    verbs = [" ".join(call[1:3]) for call in runner.calls if call[1] != "get"]
    assert verbs == ["set image", "rollout status", "rollout undo", "set image", "rollout status"]
    assert runner.calls[3][-1] == "agent=desk:r1"


def test_cancelled_promotion_is_rolled_back(tmp_path, root, clock):
    activator = RecordingActivator()
    assert promote(root, "r1", make_source(tmp_path, "r1"), activator, [health_probe(root)], clock).outcome == \
        "promoted"
    result = promote(root, "r2", make_source(tmp_path, "r2"), activator, [health_probe(root)], clock,
                     should_stop=lambda: True)
    assert result.outcome == PromotionOutcome.ROLLED_BACK and result.reason == PromotionReason.CANCELLED
    assert activator.reloads == ["r1", "r2", "r1"] and release_current_get(releases_root=root) == "r1"


def test_manual_rollback_and_retention(tmp_path, root, clock):
    activator = RecordingActivator()
    for index in range(1, 5):
        result = promote(root, f"r{index}", make_source(tmp_path, f"r{index}"), activator, [health_probe(root)],
                         clock, keep_releases=2)
        assert result.outcome == PromotionOutcome.PROMOTED
    assert result.removed_releases == ("r2",)
    assert sorted(p.name for p in (root / "releases").iterdir()) == ["r3", "r4"]
    back = hot_swap_rollback(releases_root=root, activator=activator, probes=[health_probe(root)],
                             sleep=clock.sleep, clock=clock.monotonic)
    assert back.outcome == PromotionOutcome.ROLLED_BACK and back.reason == PromotionReason.MANUAL
    assert release_current_get(releases_root=root) == "r3"
    state = release_state_get(releases_root=root)
    assert state.last_good == "r3" and state.history[-1].kind == "manual"
    with pytest.raises(DeployInvalid, match="not staged"):
        hot_swap_rollback(releases_root=root, activator=activator, probes=[health_probe(root)], to_release="r1")


def test_promote_checks_its_arguments(tmp_path, root):
    activator = RecordingActivator()
    with pytest.raises(DeployInvalid, match="at least one health probe"):
        hot_swap_promote(releases_root=root, release_id="r1", activator=activator, probes=[])
    with pytest.raises(DeployInvalid, match="not staged"):
        hot_swap_promote(releases_root=root, release_id="r1", activator=activator, probes=[health_probe(root)])
    with pytest.raises(DeployInvalid, match="keep_releases"):
        hot_swap_promote(releases_root=root, release_id="r1", activator=activator, probes=[health_probe(root)],
                         keep_releases=0)
    result = hot_swap_promote(releases_root=root, release_id="r1", repo_path=tmp_path, commit="f" * 40,
                              activator=activator, probes=[health_probe(root)])
    assert result.outcome == PromotionOutcome.FAILED and result.reason == PromotionReason.STAGE_FAILED
    assert activator.reloads == [] and "Staging release r1" in result.detail


# --- the target config's hot_swap section ----------------------------------------------------------------------


def test_hot_swap_config_builds_the_plan_and_promotes(tmp_path, root, clock, activators):
    config = hot_swap_config_validate({
        "activator": {"kind": "process", "command": "python agent.py", "env": {"HEARTBEAT": str(root / "beat")}},
        "preflight_commands": ["python -c 'import agent_is_a_script'"],
        "health": {"interval_s": 1, "window_s": 10, "passes_required": 2},
        "keep_releases": 3,
    })
    plan = config.build(releases_root=root, health_command="python health.py")
    assert isinstance(plan.activator, ProcessActivator) and plan.activator.pid_file == root / "agent.pid"
    assert [type(p) for p in plan.probes] == [CommandProbe, ProcessAliveProbe]
    assert plan.probes[0].cwd == root / "current" and plan.probes[1].target is plan.activator
    failed_preflight = promote(root, "r1", make_source(tmp_path, "r1"), **plan.promote_kwargs(), clock=clock)
    assert failed_preflight.reason == PromotionReason.PREFLIGHT_FAILED  # no such module
    kwargs = {**plan.promote_kwargs(), "preflight_commands": ["python -c 'import health'"]}
    result = promote(root, "r2", make_source(tmp_path, "r2"), **kwargs, clock=clock)
    assert result.outcome == PromotionOutcome.PROMOTED and len(result.health.rounds) == 2
    plan.activator.stop()

    explicit = hot_swap_config_validate({
        "activator": {"kind": "systemd", "unit": "desk.service", "user": True},
        "probes": [{"kind": "http", "url": "http://127.0.0.1:9/health"}, {"kind": "heartbeat", "path": "beat"},
                   {"kind": "command", "command": "python health.py", "timeout_s": 3}],
    }).build(releases_root=root, health_command="ignored when probes are given", runner=FakeRunner())
    assert isinstance(explicit.activator, SystemdActivator) and explicit.activator.user
    assert [type(p) for p in explicit.probes] == [HttpProbe, HeartbeatFileProbe, CommandProbe]
    assert explicit.probes[1].path == root / "beat" and explicit.probes[2].timeout_s == 3


def test_hot_swap_config_names_every_bad_field():
    with pytest.raises(DeployInvalid) as caught:
        hot_swap_config_validate({
            "activator": {"kind": "kubernetes", "deployment": "desk", "container": "agent", "image": "desk:latest"},
            "probes": [{"kind": "http", "url": "localhost/health"}, {"kind": "ping"}],
            "health": {"interval_s": 50},
            "preflight_commands": ["python -c 'unclosed"],
            "surprise": True,
        })
    fields = caught.value.extra["fields"]
    assert "{release_id}" in fields["hot_swap.activator.kubernetes.image"]
    assert "http://" in fields["hot_swap.probes.0.http.url"]
    assert "ping" in fields["hot_swap.probes.1"]
    assert "cannot fit" in fields["hot_swap.health"]
    assert "No closing quotation" in fields["hot_swap.preflight_commands"]
    assert "hot_swap.surprise" in fields
    with pytest.raises(DeployInvalid, match="one word"):
        hot_swap_config_validate({"activator": {"kind": "systemd", "unit": "two words"}})
    with pytest.raises(DeployInvalid, match="JSON object"):
        hot_swap_config_validate(["activator"])


# --- the example agent as a hot-swap target ---------------------------------------------------------------------


def test_support_desk_release_that_breaks_its_health_command_is_rolled_back(tmp_path, root, clock, activators):
    from examples.support_desk.target_repo import EVOLUTION_CONFIG, target_repo_make

    repo = tmp_path / "desk"
    good = target_repo_make(dest=repo)
    package_init = repo / "support_desk" / "__init__.py"
    package_init.write_text(package_init.read_text() + "\nraise RuntimeError('release 2 cannot start')\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "commit", "-q", "-am", "release 2"], check=True, env=env)
    bad = subprocess.run([*git, "rev-parse", "HEAD"], check=True, env=env, capture_output=True, text=True).stdout

    plan = hot_swap_config_validate({
        "activator": {"kind": "process", "command": "python -c 'import support_desk, time\nwhile True: time.sleep(1)'"},
        "health": {"window_s": 20},  # 5 failing rounds are as telling as 19, and each runs the canary task
    }).build(releases_root=root, health_command=EVOLUTION_CONFIG["health_command"])
    try:
        first = hot_swap_promote(releases_root=root, release_id=f"desk-{good[:12]}", repo_path=repo, commit=good,
                                 sleep=clock.sleep, clock=clock.monotonic, **plan.promote_kwargs())
        assert first.outcome == PromotionOutcome.PROMOTED, first.detail
        second = hot_swap_promote(releases_root=root, release_id=f"desk-{bad.strip()[:12]}", repo_path=repo,
                                  commit=bad.strip(), sleep=clock.sleep, clock=clock.monotonic,
                                  **plan.promote_kwargs())
    finally:
        plan.activator.stop()
    assert second.outcome == PromotionOutcome.ROLLED_BACK and second.reason == PromotionReason.HEALTH_FAILED
    assert "release 2 cannot start" in second.health.rounds[0].report.results[0].detail
    assert release_current_get(releases_root=root) == f"desk-{good[:12]}" and second.rollback_health.healthy
