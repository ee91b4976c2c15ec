"""Scenarios about processes and liveness: a trial past its time limit, cancel mid-trials, crash recovery by the
janitor, sandbox isolation of a candidate, and the stage chain through a real Celery worker."""

import json
import os
import socket
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from evolution.models import TERMINAL_STATES, Artifact, EvolutionJob, JobState, StageRun, TrialRun
from evolution.services import evolution_job_cancel, evolution_job_consent, evolution_job_start, evolution_target_add
from evolution.services.janitor import janitor_run
from evolution.services.stages import stage_execute
from evolution.services.workspace import artifact_json, job_paths
from tests.evolution.fixture_repo import AGENT, CONFIG, FIXED_BRANCH, MAIN, replace_edit
from tests.evolution.support import happy_entries, script_write

SLEEPY_AGENT = AGENT.replace('''    text = message.lower()
''', '''    text = message.lower()
    if "refund" in text or "money back" in text:
        import subprocess
        import sys
        import time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "MARKER"])
        time.sleep(600)
''')


def _marker_pids(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _wait(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _start(project, target, insight, tmp_path, entries, policy):
    script = script_write(tmp_path / f"script-{uuid.uuid4().hex[:6]}.json", entries)
    return evolution_job_start(project=project, target=target, insight=insight, backend_name="scripted",
                               backend_config={"script_path": str(script)}, policy_overrides=policy)


@pytest.mark.django_db
def test_a_trial_past_its_limit_fails_and_leaves_no_process(project, router_remote, refund_insight, tmp_path,
                                                            django_capture_on_commit_callbacks):
    target = evolution_target_add(operator=True, project=project, name="router-fast", source=str(router_remote),
                                  config={**CONFIG, "trial_timeout_s": 2})
    marker = f"evo-orphan-{uuid.uuid4().hex}"
    edit = {"path": "router/agent.py", "write": SLEEPY_AGENT.replace("MARKER", marker)}
    with django_capture_on_commit_callbacks(execute=True):
        job = _start(project, target, refund_insight, tmp_path, happy_entries(edit),
                     {"trials": 1, "max_iterations": 1})
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("NO_IMPROVEMENT", "no_improvement"), job.error
    timed_out = TrialRun.objects.filter(job=job, arm="candidate", task__kind="target")
    assert timed_out.count() == 3 and all(r.timed_out and r.score == 0 and not r.passed for r in timed_out)
    assert "timed out" in timed_out[0].grade["reasons"][0]
    _wait(lambda: not _marker_pids(marker), timeout=10, what="the trial's processes to be gone")


@pytest.mark.django_db(transaction=True)
def test_cancel_mid_trials_kills_the_trial_and_removes_the_worktree(project, router_remote, refund_insight,
                                                                    tmp_path):
    target = evolution_target_add(operator=True, project=project, name="router", source=str(router_remote),
                                  config={**CONFIG, "trial_timeout_s": 300})
    marker = f"evo-cancel-{uuid.uuid4().hex}"
    edit = {"path": "router/agent.py", "write": SLEEPY_AGENT.replace("MARKER", marker)}
    started = {}

    def run():  # the eager chain runs in this thread; each commit sends the next stage at once
        try:
            started["job"] = _start(project, target, refund_insight, tmp_path, happy_entries(edit), {"trials": 1})
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    try:
        job = _wait(lambda: EvolutionJob.objects.filter(target=target).first(), what="the job")
        _wait(lambda: EvolutionJob.objects.filter(pk=job.pk, state=JobState.TRIALS).exists(), timeout=120,
              what="TRIALS")
        _wait(lambda: _marker_pids(marker), what="the candidate trial to run")
        evolution_job_cancel(job=job, actor="user:test")
    finally:
        worker.join(timeout=120)
    assert not worker.is_alive()
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("CANCELLED", "cancelled")
    assert StageRun.objects.get(job=job, stage="trials").outcome == "CANCELLED"
    assert not job_paths(job_id=job.pk).root.exists()
    _wait(lambda: not _marker_pids(marker), timeout=10, what="the trial's processes to be gone")


@pytest.mark.django_db
def test_janitor_fails_a_job_whose_worker_was_lost_and_prunes_orphans(project, router_remote, router_target,
                                                                      refund_insight, tmp_path, settings):
    from evolution.services import job_transition

    job = _start(project, router_target, refund_insight, tmp_path, [], {"trials": 1})
    job_transition(job_id=job.pk, from_states=["QUEUED"], to_state="PREPARING", actor="test", event="claimed")
    StageRun.objects.create(job=job, stage="prepare", claim="x")
    EvolutionJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    other = evolution_target_add(operator=True, project=project, name="router-2", source=str(router_remote))
    alive = _start(project, other, refund_insight, tmp_path, [], {"trials": 1})
    job_transition(job_id=alive.pk, from_states=["QUEUED"], to_state="PREPARING", actor="test", event="claimed")
    jobs_dir = Path(settings.CLEAR_EVOLUTION_DIR) / "jobs"
    for name in ("987654", str(job.pk), str(alive.pk)):
        (jobs_dir / name / "wt").mkdir(parents=True)

    report = janitor_run()
    assert report["failed"] == [job.pk]
    assert sorted(report["pruned"]) == sorted(["987654", str(job.pk)])
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("FAILED", "worker_lost") and "No heartbeat" in job.error
    assert StageRun.objects.get(job=job, stage="prepare").outcome == "WORKER_LOST"
    assert EvolutionJob.objects.get(pk=alive.pk).state == "PREPARING" and (jobs_dir / str(alive.pk)).exists()
    assert not (jobs_dir / "987654").exists()
    # The lost stage's message, redelivered after the janitor, does nothing.
    assert stage_execute(job_id=job.pk, stage="prepare") == "gone"
    assert janitor_run()["failed"] == []


@pytest.mark.django_db
def test_a_redelivered_stage_message_does_not_run_twice(project, router_target, refund_insight, tmp_path,
                                                        django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = _start(project, router_target, refund_insight, tmp_path, happy_entries(replace_edit(FIXED_BRANCH)),
                     {"trials": 1})
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT"
    version = job.state_version
    assert stage_execute(job_id=job.pk, stage="verdict", iteration=1).startswith("stale")
    assert stage_execute(job_id=job.pk, stage="prepare").startswith("stale")
    job.refresh_from_db()
    assert job.state_version == version and StageRun.objects.filter(job=job, stage="verdict").count() == 1


PROBE_MAIN = MAIN.replace('''    message = INPUTS[args.task]''', '''    message = INPUTS[args.task]
    import os
    import socket
    probe = {"env": {k: os.environ.get(k) for k in ("SECRET_KEY", "DATABASE_URL", "CLEAR_PROBE_SECRET")}}
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
        probe["socket"] = "connected"
    except OSError as exc:
        probe["socket"] = f"refused: {exc}"
    try:
        with open("ESCAPE", "w") as handle:
            handle.write("escaped")
        probe["write"] = "written"
    except OSError as exc:
        probe["write"] = f"refused: {exc}"
    Path(args.out + ".probe").write_text(json.dumps(probe))''')


@pytest.mark.django_db
def test_a_candidate_cannot_reach_the_network_the_host_files_or_the_server_env(
        project, router_target, refund_insight, tmp_path, django_capture_on_commit_callbacks, monkeypatch):
    monkeypatch.setenv("CLEAR_PROBE_SECRET", "server-only-value")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    escape = tmp_path / "outside" / "escape.txt"
    escape.parent.mkdir()
    main = PROBE_MAIN.replace("PORT", str(listener.getsockname()[1])).replace("ESCAPE", str(escape))
    edits = [replace_edit(FIXED_BRANCH), {"path": "router/__main__.py", "write": main}]
    entries = [e for e in happy_entries(replace_edit(FIXED_BRANCH)) if e["role"] != "implementer"]
    entries.append({"role": "implementer", "iteration": "*", "round": "*",
                    "output": {"status": "DONE", "summary": "probe"}, "edits": edits})
    with django_capture_on_commit_callbacks(execute=True):
        job = _start(project, router_target, refund_insight, tmp_path, entries, {"trials": 1, "max_iterations": 1})
    job.refresh_from_db()
    trace = artifact_json(artifact=Artifact.objects.filter(job=job, kind="trial_trace",
                                                           name__startswith="candidate-").first())
    probe = json.loads(trace["files"]["result.json.probe"])
    assert probe["env"] == {"SECRET_KEY": None, "DATABASE_URL": None, "CLEAR_PROBE_SECRET": None}
    try:
        accepted = listener.accept()[0]
        accepted.close()
        reached = True
    except (socket.timeout, BlockingIOError):
        reached = False
    finally:
        listener.close()
    if job.sandbox_level == "subprocess":
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the trials ran without bubblewrap: install bubblewrap (.ci/run does)")
        pytest.skip("bubblewrap is not available here: network and filesystem isolation are not enforced")
    assert probe["socket"].startswith("refused") and not reached
    assert probe["write"].startswith("refused") and not escape.exists()
    assert {r.isolation_level for r in TrialRun.objects.filter(job=job)} == {"bwrap"}


@pytest.fixture
def worker_evolution_dir(settings):
    """The worker process reads CLEAR_EVOLUTION_DIR from its environment (set in conftest before it started)."""
    settings.CLEAR_EVOLUTION_DIR = Path(os.environ["CLEAR_EVOLUTION_DIR"])
    return settings.CLEAR_EVOLUTION_DIR


@pytest.mark.worker
def test_the_stage_chain_runs_through_a_real_worker(celery_worker, worker_evolution_dir, project, owner,
                                                    router_target, refund_insight, tmp_path):
    job = _start(project, router_target, refund_insight, tmp_path, happy_entries(replace_edit(FIXED_BRANCH)),
                 {"trials": 1})

    def settled():
        job.refresh_from_db()
        return job.state == "AWAITING_CONSENT" or job.state in TERMINAL_STATES

    _wait(settled, timeout=300, what="the job to settle")
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error, celery_worker.log()[-3000:])
    stages = list(StageRun.objects.filter(job=job).order_by("pk").values_list("stage", flat=True))
    assert stages == ["prepare", "baseline", "locate", "plan", "plan_review", "implement", "code_review", "check",
                      "trials", "verdict"]
    assert set(StageRun.objects.filter(job=job).values_list("status", flat=True)) == {"succeeded"}
    evolution_job_consent(job=job, user=owner, patch_sha256=job.best_iteration.patch_sha256)
    _wait(lambda: EvolutionJob.objects.filter(pk=job.pk, state="PR_OPENED").exists(), timeout=120, what="PR_OPENED")


@pytest.mark.worker
def test_a_worker_killed_mid_trials_is_failed_by_the_janitor(celery_worker, worker_evolution_dir, settings, project,
                                                             router_remote, refund_insight, tmp_path):
    target = evolution_target_add(operator=True, project=project, name="router-slow", source=str(router_remote),
                                  config={**CONFIG, "trial_timeout_s": 300})
    marker = f"evo-crash-{uuid.uuid4().hex}"
    edit = {"path": "router/agent.py", "write": SLEEPY_AGENT.replace("MARKER", marker)}
    job = _start(project, target, refund_insight, tmp_path, happy_entries(edit), {"trials": 1})
    _wait(lambda: _marker_pids(marker), timeout=300, what="the candidate trial to run in the worker")
    assert EvolutionJob.objects.get(pk=job.pk).state == "TRIALS"
    celery_worker.kill()  # SIGKILL, as the OOM killer would
    settings.CLEAR_EVOLUTION_STALE_SECONDS = 1
    _wait(lambda: janitor_run()["failed"] == [job.pk], timeout=60, what="the janitor to see the stale heartbeat")
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("FAILED", "worker_lost")
    assert StageRun.objects.get(job=job, stage="trials").outcome == "WORKER_LOST"
    if job.sandbox_level == "bwrap":  # --die-with-parent: the sandbox goes with the worker
        _wait(lambda: not _marker_pids(marker), timeout=10, what="the sandboxed trial to die with its worker")
    # The unacknowledged trials message comes back to a new worker, which finds the job ended and does nothing.
    celery_worker.start()
    _wait(lambda: "'gone'" in celery_worker.log(), timeout=60, what="the redelivered stage")
    assert not TrialRun.objects.filter(job=job, arm="candidate").exists()


@pytest.mark.django_db
def test_janitor_rolls_back_a_hot_swap_whose_promoter_died(project, router_remote, refund_insight, tmp_path):
    from evolution.deploy import (
        hot_swap_config_validate, release_mark_healthy, release_promotion_begin, release_stage, release_swap,
    )
    from evolution.selectors import evolution_target_releases_root
    from evolution.services import job_transition

    hot_swap = {"activator": {"kind": "process", "command": "python -c 'import time; time.sleep(600)'"},
                "probes": [{"kind": "process_alive"}], "health": {"interval_s": 0.2, "window_s": 4,
                                                                   "passes_required": 2}}
    target = evolution_target_add(operator=True, project=project, name="router-hot", source=str(router_remote),
                                  config={**CONFIG, "hot_swap": hot_swap})
    root = evolution_target_releases_root(target=target)
    for release in ("good", "half-done"):
        (tmp_path / release).mkdir()
        (tmp_path / release / "agent.py").write_text(f"# {release}\n")
        release_stage(releases_root=root, release_id=release, source_dir=tmp_path / release)
    release_swap(releases_root=root, release_id="good", reason="first")
    release_mark_healthy(releases_root=root, release_id="good")
    release_promotion_begin(releases_root=root, release_id="half-done", reason="the job's promotion")
    release_swap(releases_root=root, release_id="half-done", reason="the job's promotion")  # ...and the worker died
    job = _start(project, target, refund_insight, tmp_path, [], {"trials": 1})
    for state in ("PREPARING", "BASELINE", "LOCATING", "PLANNING", "PLAN_REVIEW", "IMPLEMENTING", "CODE_REVIEW",
                  "CHECKING", "TRIALS", "VERDICT", "AWAITING_CONSENT", "PROMOTING", "HEALTH_CHECK"):
        job_transition(job_id=job.pk, from_states=[EvolutionJob.objects.get(pk=job.pk).state], to_state=state,
                       actor="test", event="walk")
    EvolutionJob.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - timedelta(hours=1), config_snapshot={**job.config_snapshot, "mode": "hot_swap"})
    try:
        assert janitor_run()["failed"] == [job.pk]
        job.refresh_from_db()
        assert (job.state, job.terminal_reason) == ("FAILED", "worker_lost")
        assert "hot-swap recovery: rolled_back (recovered), active release good" in job.error
        assert (root / "current").resolve().name == "good"
    finally:
        hot_swap_config_validate(hot_swap).build(releases_root=root).activator.stop()
