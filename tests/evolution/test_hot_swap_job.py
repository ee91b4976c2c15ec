"""Hot-swap mode of a job end to end (evolution.md §7.3 steps 13–15, §7.14 scenario 9): scripted jobs on the fixture
router promote releases through a real ProcessActivator with fast health parameters from the target config; the
Release rows follow deploy's state.json; the one-click rollback; every transition reaches a webhook."""

import json

import pytest
from rest_framework.test import APIClient

from evolution.deploy import hot_swap_config_validate, release_current_get, release_state_get
from evolution.models import Artifact, AuditEvent, InsightFix, Release
from evolution.services import evolution_job_consent, evolution_target_add
from evolution.services.api_actions import evolution_job_create
from evolution.services.hot_swap import release_rollback_to_previous, releases_root
from evolution.services.workspace import artifact_read
from tests.api.test_webhooks import Receiver, _signature_ok, _subscribe
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, replace_edit
from tests.evolution.support import happy_entries, script_write
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

# A shared dependency every release needs: while <releases root>/shared/outage exists, no release is healthy. The
# sandboxed release sees nothing of the releases root but its heartbeat directory (shared/), where it beats.
DEPENDENCY_PROBE = "python -c \"import os, sys; sys.exit(os.path.exists('../../shared/outage'))\""
AGENT = "python -c 'import pathlib, time; pathlib.Path(\"../../shared/beat\").touch(); time.sleep(600)'"
HOT_SWAP = {
    "activator": {"kind": "process", "command": AGENT, "stop_timeout_s": 5},
    "preflight_commands": ["python -c 'import router'"],
    "probes": [{"kind": "command", "command": "python health.py", "timeout_s": 10},
               {"kind": "command", "command": DEPENDENCY_PROBE, "timeout_s": 10}, {"kind": "process_alive"},
               {"kind": "heartbeat", "path": "shared/beat", "max_age_s": 600}],
    # Fast through the config; the defaults (5 s, 90 s, 3 passes) are the deploy library's and stay.
    "health": {"interval_s": 0.2, "window_s": 3, "passes_required": 2},
    "keep_releases": 5,
}
FIXED_AGAIN = FIXED_BRANCH.replace('return "refunds"', 'return "refunds"  # the refunds desk owns refunds')
HEALTH_BREAKING = FIXED_BRANCH + '''    if "hello" in text:
        return "billing"
'''


@pytest.fixture
def hot_target(project, router_remote):
    target = evolution_target_add(operator=True, project=project, name="router-hot", source=str(router_remote),
                                  config={**CONFIG, "hot_swap": HOT_SWAP})
    yield target
    hot_swap_config_validate(HOT_SWAP).build(releases_root=releases_root(target=target)).activator.stop()


@pytest.fixture
def promote(project, owner, hot_target, refund_insight, tmp_path, django_capture_on_commit_callbacks):
    def run(branch: str, name: str):
        script = script_write(tmp_path / f"{name}.json", happy_entries(replace_edit(branch)))
        with django_capture_on_commit_callbacks(execute=True):
            job = evolution_job_create(project=project, target=hot_target, insight=refund_insight,
                                       backend_name="scripted",  # the API's way: an inline script
                                       backend_config={"script": json.loads(script.read_text())},
                                       depth="shallow", mode="hot_swap", confirm=True)
        job.refresh_from_db()
        assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
        with django_capture_on_commit_callbacks(execute=True):
            evolution_job_consent(job=job, user=owner, patch_sha256=job.best_iteration.patch_sha256)
        job.refresh_from_db()
        return job, f"job-{job.pk}-{job.best_iteration.candidate_commit[:12]}"

    return run


def _path(job):
    return [e.to_state for e in AuditEvent.objects.filter(job=job).exclude(to_state="").order_by("pk")
            if e.event != "created"]


def _statuses(target):
    return {r.release_id: r.status for r in Release.objects.filter(target=target)}


def _report(job):
    return json.loads(artifact_read(artifact=Artifact.objects.get(job=job, kind="health_report")))


def test_promote_rollback_and_a_failed_rollback_through_jobs(promote, hot_target, owner, settings, tmp_path):
    settings.CLEAR_EVOLUTION_RELEASES_DIR = tmp_path / "releases-elsewhere"
    root = releases_root(target=hot_target)
    assert root == tmp_path / "releases-elsewhere" / str(hot_target.pk)

    # The releases root moved since the target was registered: the first job records release zero there.
    job1, r1 = promote(FIXED_BRANCH, "one")
    assert (job1.state, job1.terminal_reason) == ("PROMOTED", "healthy"), job1.error
    r0 = job1.base_release.release_id
    assert r0.startswith("release-0-") and job1.base_release.job is None
    assert _path(job1)[-3:] == ["PROMOTING", "HEALTH_CHECK", "PROMOTED"]
    assert release_current_get(releases_root=root) == r1 and (root / "current").resolve().name == r1
    row1 = Release.objects.get(target=hot_target, release_id=r1)
    assert (row1.status, row1.job, row1.commit, row1.previous.release_id) == (
        "active", job1, job1.best_iteration.candidate_commit, r0)
    assert row1.activated_at and row1.health_report["health"]["healthy"]
    fix = InsightFix.objects.get(job=job1)  # the loop watches the release carrying the fix
    assert (fix.release, fix.status, fix.insight_id) == (r1, "watching", job1.insight_id)
    assert _statuses(hot_target) == {r0: "superseded", r1: "active"}

    # The release history's rollback: back to release zero, re-probed healthy; job 1's fix is no longer live.
    result = release_rollback_to_previous(target=hot_target, user=owner)
    assert (str(result.outcome), result.active_release) == ("rolled_back", r0)
    assert release_current_get(releases_root=root) == r0
    assert _statuses(hot_target) == {r0: "active", r1: "rolled_back"}
    assert InsightFix.objects.get(job=job1).status == "rolled_back"
    assert AuditEvent.objects.filter(job=job1, event="release_rolled_back", data__to_release=r0).exists()
    # Its insight's page still says a fix was promoted and rolled back (issue 40), linking the job.
    page = client_for(owner).get(f"/p/{hot_target.project.slug}/insights/{job1.insight_id}/").content.decode()
    note = page.split('data-testid="insight-fix-note"', 1)[1].split("</p>", 1)[0]
    assert 'data-kind="rolled_back"' in note and f"job {job1.pk}, release {r1}" in note and "rolled back" in note
    assert f"/evolution/jobs/{job1.pk}/" in note

    # The next job starts from the live release, release zero.
    job2, r2 = promote(FIXED_AGAIN, "two")
    assert (job2.state, job2.terminal_reason, job2.base_release.release_id) == ("PROMOTED", "healthy", r0), job2.error
    assert _statuses(hot_target) == {r0: "superseded", r1: "rolled_back", r2: "active"}
    assert Release.objects.get(release_id=r2).previous.release_id == r0
    result = release_rollback_to_previous(target=hot_target, user=owner)
    assert (str(result.outcome), result.active_release) == ("rolled_back", r0)

    # §7.14 scenario 9: the health command fails in the new release → ROLLED_BACK, current back on r0, re-probe passes.
    job3, r3 = promote(HEALTH_BREAKING, "three")
    assert (job3.state, job3.terminal_reason) == ("ROLLED_BACK", "health_failed"), job3.error
    assert _path(job3)[-4:] == ["PROMOTING", "HEALTH_CHECK", "ROLLING_BACK", "ROLLED_BACK"]
    assert release_current_get(releases_root=root) == r0
    report = _report(job3)
    assert not report["health"]["healthy"] and report["rollback_to"] == r0 and report["rollback_health"]["healthy"]
    assert _statuses(hot_target) == {r0: "active", r1: "rolled_back", r2: "rolled_back", r3: "rolled_back"}
    assert not InsightFix.objects.filter(job=job3).exists()

    # A rollback that itself fails: the shared dependency is down, so r0 fails its re-probe too.
    (root / "shared" / "outage").write_text("database down\n")
    job4, r4 = promote(FIXED_AGAIN, "four")
    assert (job4.state, job4.terminal_reason) == ("FAILED", "rollback_unhealthy")
    assert _path(job4)[-4:] == ["PROMOTING", "HEALTH_CHECK", "ROLLING_BACK", "FAILED"]
    assert f"rolled back to {r0}, but it is unhealthy too" in job4.error and "needs a person" in job4.error
    assert release_current_get(releases_root=root) == r0
    assert not _report(job4)["rollback_health"]["healthy"]
    assert _statuses(hot_target)[r4] == "rolled_back"
    state = release_state_get(releases_root=root)
    assert state.pending is None and state.releases[r0].status == "unhealthy"


def test_every_transition_of_a_hot_swap_job_reaches_a_webhook(promote, project, issued_key, settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True  # the Receiver listens on 127.0.0.1, a loopback address
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    with Receiver() as receiver:
        webhook = _subscribe(client, receiver.url, events=["evolution_job.state_changed"])
        job, _ = promote(FIXED_BRANCH, "hooked")
    assert job.state == "PROMOTED", job.error
    assert all(_signature_ok(r, webhook["secret"]) for r in receiver.requests)
    bodies = [json.loads(r["body"]) for r in receiver.requests]
    assert {b["event"] for b in bodies} == {"evolution_job.state_changed"}
    changes = [(b["data"]["from"], b["data"]["to"]) for b in bodies]
    transitions = [(e.from_state, e.to_state) for e in AuditEvent.objects.filter(job=job).order_by("pk")
                   if e.from_state and e.from_state != e.to_state]
    assert changes == transitions and changes[0] == ("QUEUED", "PREPARING") and changes[-1] == ("HEALTH_CHECK",
                                                                                                  "PROMOTED")
    last = bodies[-1]["data"]
    assert (last["job"]["id"], last["insight"]["id"], last["reason"], last["job"]["mode"]) == (
        job.pk, job.insight_id, "healthy", "hot_swap")
    assert bodies[0]["data"]["reason"] == ""
