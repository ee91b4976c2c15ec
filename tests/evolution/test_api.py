"""The evolution REST API (/api/v1/evolution/): targets CRUD with every bad config field named, jobs created for an
insight or a ticket, listed with filters, followed through a real pipeline run (scripted backend, fixture router
repository, sandbox, eager Celery) to its verdict, cancelled; approve, discard and rollback answer every key 403 (an
owner decides in the web UI, by the patch hash seen)."""

import hashlib
import json

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.tickets.models import Ticket
from evolution.models import AuditEvent, EvolutionJob
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, replace_edit
from tests.evolution.support import happy_entries, script_write, target_register
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

TARGETS = "/api/v1/evolution/targets/"
JOBS = "/api/v1/evolution/jobs/"


@pytest.fixture(autouse=True)
def source_roots(settings, tmp_path):
    """The operator lets API users register repositories under the test's directory (the fixture router's)."""
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]


@pytest.fixture
def script(tmp_path):
    return script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))


def _job_body(target, insight, script, **extra):
    # Inline: through the API a script file must be one of the target's scripted_fixtures (the operator's).
    return {"target": target.pk, "insight": insight.pk, "backend": "scripted",
            "backend_config": {"script": json.loads(script.read_text())}, "depth": "shallow", **extra}


def test_a_bad_target_config_is_a_400_naming_every_bad_field(api, router_remote, project):
    from evolution.errors import EvolutionConfigInvalid
    from evolution.services import evolution_target_add

    config = {**CONFIG, "diff_budget": {"max_files": 0}, "colour": "blue"}
    response = api.post(TARGETS, {"name": "router", "source": str(router_remote), "config": config}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "evolution_config_invalid"
    fields = body["extra"]["fields"]
    assert set(fields) == {"diff_budget.max_files", "colour"}, fields
    for name in fields:
        assert name in body["message"]
    # The commands and sandbox levels are the repository's, known once a worker has read it: the client's own bad
    # fields are still named at once; another command or level ends the target failed, each named.
    changed = {**config, "trial_command": "python -m router --out {out}", "sandbox_levels": ["chroot"]}
    response = api.post(TARGETS, {"name": "router", "source": str(router_remote), "config": changed}, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()["extra"]["fields"]) == {"diff_budget.max_files", "colour"}
    commands_changed = {**CONFIG, "trial_command": changed["trial_command"], "sandbox_levels": ["chroot"]}
    response, target = target_register(api, {"name": "router", "source": str(router_remote),
                                             "config": commands_changed})
    assert response.status_code == 201 and response.json()["state"] == "cloning", response.content
    assert target["state"] == "failed" and target["config"] == {}, target
    for field in ("config.trial_command", "config.sandbox_levels"):
        assert field in target["state_reason"], target["state_reason"]
    assert api.delete(f"{TARGETS}{target['id']}/").status_code == 204
    # The operator's config is validated the same way, every bad field named.
    with pytest.raises(EvolutionConfigInvalid) as raised:
        evolution_target_add(operator=True, project=project, name="router", source=str(router_remote), config=changed)
    fields = raised.value.extra["fields"]
    assert set(fields) == {"trial_command", "diff_budget.max_files", "sandbox_levels", "colour"}, fields
    assert "{task_id}" in fields["trial_command"] and "chroot" in fields["sandbox_levels"]
    # Without a config the repository's evolution.json is read; a source that is no repository names `source`.
    response = api.post(TARGETS, {"name": "nowhere", "source": "/nonexistent/repo"}, format="json")
    assert response.status_code == 400 and "source" in response.json()["extra"]["fields"]


def test_targets_crud(api, router_remote, project, refund_insight, script):
    response, target = target_register(api, {"name": "router", "source": str(router_remote)})
    assert response.status_code == 201, response.content
    assert response.json()["state"] == "cloning" and target["state"] == "ready", target
    assert target["config"]["trial_command"] == CONFIG["trial_command"]  # read from the repo's evolution.json
    assert api.post(TARGETS, {"name": "router", "source": str(router_remote)}, format="json").json()["code"] \
        == "target_exists"
    url = f"{TARGETS}{target['id']}/"
    assert api.get(url).json()["name"] == "router"
    assert [row["name"] for row in api.get(TARGETS).json()["results"]] == ["router"]

    bad = api.patch(url, {"config": {**CONFIG, "trials": 0}}, format="json")
    assert bad.status_code == 400 and set(bad.json()["extra"]["fields"]) == {"trials"}
    good = api.patch(url, {"config": {**CONFIG, "trials": 1}, "push_url": "ssh://git@git.example.com/elsewhere.git"},
                     format="json")
    assert good.status_code == 200 and good.json()["config"]["trials"] == 1
    assert good.json()["push_url"] == "ssh://git@git.example.com/elsewhere.git"

    # A target with a job keeps it: 409; one without is deleted.
    job = api.post(JOBS, {"target": target["id"], "insight": refund_insight.pk, "backend": "scripted",
                          "backend_config": {"script": json.loads(script.read_text())}}, format="json")
    assert job.status_code == 201, job.content
    assert api.delete(url).json()["code"] == "target_has_jobs"
    other = api.post(TARGETS, {"name": "spare", "source": str(router_remote), "config": CONFIG}, format="json").json()
    assert api.delete(f"{TARGETS}{other['id']}/").status_code == 204
    assert api.get(f"{TARGETS}{other['id']}/").status_code == 404


def test_jobs_create_list_filter_and_cancel(api, project, owner, router_target, refund_insight, script):
    ticket = Ticket.objects.create(project=project, insight=refund_insight, fingerprint="f", title="refunds",
                                   level="node", node="router", severity="high")
    # No insight nor ticket, an unknown backend, a bad backend config, hot swap without its config: 400s.
    for body, field in (({"target": router_target.pk, "backend": "scripted"}, "insight"),
                        (_job_body(router_target, refund_insight, script, mode="canary"), "mode"),
                        (_job_body(router_target, refund_insight, script, mode="hot_swap"), "mode")):
        response = api.post(JOBS, body, format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["extra"]["fields"], response.json()
    unknown = api.post(JOBS, _job_body(router_target, refund_insight, script, backend="telepathy"), format="json")
    assert unknown.status_code == 400 and "telepathy" in unknown.json()["message"]
    missing = api.post(JOBS, _job_body(router_target, refund_insight, script, backend_config={}), format="json")
    assert missing.status_code == 400, missing.content

    # By ticket: the ticket's insight is the one to fix.
    response = api.post(JOBS, {"target": router_target.pk, "ticket": ticket.pk, "backend": "scripted",
                               "backend_config": {"script": json.loads(script.read_text())}}, format="json")
    assert response.status_code == 201, response.content
    job = response.json()
    assert (job["state"], job["insight_id"], job["ticket_id"], job["mode"]) == \
        ("QUEUED", refund_insight.pk, ticket.pk, "pr")
    assert job["target"] == {"id": router_target.pk, "name": "router"}
    assert EvolutionJob.objects.get(pk=job["id"]).created_by is None  # made with an API key

    busy = api.post(JOBS, _job_body(router_target, refund_insight, script), format="json")
    assert busy.status_code == 409 and busy.json()["code"] == "target_busy"

    assert [row["id"] for row in api.get(JOBS).json()["results"]] == [job["id"]]
    for query, expected in (("?state=QUEUED", [job["id"]]), ("?state=FAILED", []),
                            (f"?target={router_target.pk}", [job["id"]]), ("?target=999999", []),
                            (f"?insight={refund_insight.pk}", [job["id"]]), ("?active=false", [])):
        assert [row["id"] for row in api.get(JOBS + query).json()["results"]] == expected, query
    assert api.get(JOBS + "?state=SLEEPING").status_code == 400

    cancelled = api.post(f"{JOBS}{job['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    again = api.post(f"{JOBS}{job['id']}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "job_wrong_state"
    discard = api.post(f"{JOBS}{job['id']}/discard/")
    assert discard.status_code == 403 and discard.json()["code"] == "person_required"
    assert api.post(f"{JOBS}{job['id']}/merged/", {"release": "v3"}, format="json").status_code == 409
    assert AuditEvent.objects.filter(job_id=job["id"], event="stop_requested",
                                     actor__startswith="api_key:").exists()


def test_a_job_followed_to_its_verdict_then_approved_by_an_owner_by_the_hash_seen(
        api, owner, router_target, refund_insight, script, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(JOBS, _job_body(router_target, refund_insight, script), format="json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    detail = api.get(f"{JOBS}{job_id}/").json()
    assert detail["state"] == "AWAITING_CONSENT", (detail["terminal_reason"], detail["error"])
    assert [s["stage"] for s in detail["stages"]][:4] == ["prepare", "baseline", "locate", "plan"]
    assert all(s["status"] == "succeeded" for s in detail["stages"])
    verdict = detail["verdict"]
    assert verdict["verdict"]["decision"] == "PROMOTE_ELIGIBLE"
    assert {r["name"] for r in verdict["verdict"]["rules"]} >= {"G0_hard_gates", "G1_target_delta", "G2_per_task"}
    assert verdict["gates"] and all(g["passed"] for g in verdict["gates"])
    targets = [t for t in verdict["tasks"] if t["kind"] == "target"]
    assert targets and all(t["baseline_mean"] == 0 and t["candidate_mean"] == 1 for t in targets)
    assert all(len(t["baseline"]) == len(t["candidate"]) >= 1 for t in verdict["tasks"])
    kinds = {a["kind"] for a in detail["artifacts"]}
    assert {"tasks", "diagnosis", "plan", "plan_review", "patch", "code_review", "gate_report", "matrix",
            "verdict"} <= kinds
    assert [e["to_state"] for e in detail["events"]][-1] == "AWAITING_CONSENT"

    # The patch downloads as bytes whose hash is the candidate's: what approve must be sent.
    candidate = detail["candidate"]
    patch = [a for a in detail["artifacts"] if a["kind"] == "patch"][-1]
    download = api.get(patch["download"])
    assert download.status_code == 200 and download["Content-Type"] == "application/octet-stream"
    assert "attachment" in download["Content-Disposition"]
    assert hashlib.sha256(download.content).hexdigest() == candidate["patch_sha256"] == patch["sha256"]
    assert b'+        return "refunds"' in download.content
    assert api.get(f"{JOBS}{job_id}/artifacts/999999/").status_code == 404
    # Ids past bigint are misses too.
    assert api.get(f"{JOBS}{job_id}/artifacts/{10**30}/").status_code == 404
    assert api.get(f"{JOBS}{10**30}/").status_code == 404
    assert api.get(f"{TARGETS}{10**30}/").status_code == 404

    # No key approves, the owner's included (issue 37): the owner does, on the job's page, with the hash seen.
    orphan = api_key_create(project=router_target.project, name="robot", created_by=None)
    robot = APIClient(HTTP_AUTHORIZATION=f"Bearer {orphan.secret}")
    for client in (api, robot):
        refused = client.post(f"{JOBS}{job_id}/approve/", {"patch_sha256": candidate["patch_sha256"]}, format="json")
        assert refused.status_code == 403 and refused.json()["code"] == "person_required", refused.content
        assert "web UI" in refused.json()["message"]
    assert EvolutionJob.objects.get(pk=job_id).state == "AWAITING_CONSENT"
    web = client_for(owner)
    page = f"/p/{router_target.project.slug}/evolution/jobs/{job_id}/"
    stale = web.post(f"{page}approve/", {"patch_sha256": "0" * 64}, follow=True)
    assert "review the current diff" in stale.content.decode()
    assert EvolutionJob.objects.get(pk=job_id).state == "AWAITING_CONSENT"
    with django_capture_on_commit_callbacks(execute=True):
        approved = web.post(f"{page}approve/", {"patch_sha256": candidate["patch_sha256"]})
    assert approved.status_code == 302, approved.content
    detail = api.get(f"{JOBS}{job_id}/").json()
    assert detail["state"] == "PR_OPENED", detail["error"]
    assert detail["consent"]["by"] == owner.email and detail["consent"]["patch_sha256"] == candidate["patch_sha256"]
    assert detail["pr_branch"] == f"evo/{job_id}/1"
    assert AuditEvent.objects.filter(job_id=job_id, event="consented", actor=f"user:{owner.pk}").exists()
    assert not AuditEvent.objects.filter(job_id=job_id, actor__startswith="api_key:").exclude(
        event="stop_requested").exists()

    # The PR was merged and shipped as v3: that release is watched for the insight.
    assert api.post(f"{JOBS}{job_id}/merged/", {"release": ""}, format="json").status_code == 400
    merged = api.post(f"{JOBS}{job_id}/merged/", {"release": "v3"}, format="json")
    assert merged.status_code == 200, merged.content
    assert merged.json() == {"insight_id": refund_insight.pk, "release": "v3",
                             "commit": detail["candidate"]["commit"], "status": "watching"}


def test_discard_a_candidate_awaiting_consent(api, owner, teammate, router_target, refund_insight, script):
    job_id = api.post(JOBS, _job_body(router_target, refund_insight, script), format="json").json()["id"]
    # The consent wait reached directly: discarding only needs the state (the full run is tested above).
    EvolutionJob.objects.filter(pk=job_id).update(state="AWAITING_CONSENT")
    refused = api.post(f"{JOBS}{job_id}/discard/")
    assert refused.status_code == 403 and refused.json()["code"] == "person_required", refused.content
    url = f"/p/{router_target.project.slug}/evolution/jobs/{job_id}/discard/"
    assert client_for(teammate).post(url).status_code == 403  # a member, not an owner
    assert EvolutionJob.objects.get(pk=job_id).state == "AWAITING_CONSENT"
    assert client_for(owner).post(url).status_code == 302
    job = EvolutionJob.objects.get(pk=job_id)
    assert (job.state, job.terminal_reason) == ("CANCELLED", "discarded")
    assert AuditEvent.objects.filter(job_id=job_id, event="discarded", actor=f"user:{owner.pk}").exists()


def test_another_projects_objects_are_404_and_no_key_is_401(api, outsider_project, outsider, router_remote,
                                                            router_target, refund_insight, script):
    from evolution.services import evolution_target_add
    from tests.evolution.support import failing_traces_ingest, insight_for_traces

    theirs = evolution_target_add(operator=True, project=outsider_project, name="theirs", source=str(router_remote))
    their_insight = insight_for_traces(project=outsider_project, title="theirs",
                                       traces=failing_traces_ingest(project=outsider_project, tasks=[("x", 1)]))
    assert api.get(f"{TARGETS}{theirs.pk}/").status_code == 404
    assert api.patch(f"{TARGETS}{theirs.pk}/", {"push_url": "x"}, format="json").status_code == 404
    assert api.post(JOBS, _job_body(theirs, refund_insight, script), format="json").status_code == 404
    assert api.post(JOBS, _job_body(router_target, their_insight, script), format="json").status_code == 404
    for method, url in (("get", TARGETS), ("get", JOBS), ("post", JOBS), ("get", f"{TARGETS}{router_target.pk}/")):
        response = getattr(APIClient(), method)(url)
        assert response.status_code == 401 and response.json()["code"] == "missing_credentials"


def test_a_hot_swap_targets_releases_and_rollback(api, project, owner, tmp_path, django_capture_on_commit_callbacks):
    from evolution.models import EvolutionTarget, ReleaseRollback
    from tests.evolution.fixture_repo import CONFIG as ROUTER_CONFIG
    from tests.frontend.test_evolution_pages import HOT_SWAP, activator_stop, releases_made

    plain = EvolutionTarget.objects.create(project=project, name="plain", source="/x", config=ROUTER_CONFIG)
    hot = EvolutionTarget.objects.create(project=project, name="hot", source="/x",
                                         config={**ROUTER_CONFIG, "hot_swap": HOT_SWAP})
    assert api.get(f"{TARGETS}{plain.pk}/releases/").json() == {
        "target": {"id": plain.pk, "name": "plain"}, "hot_swap": False, "current": None, "last_good": None,
        "pending": None, "releases": [], "history": [], "error": ""}
    releases_made(target=hot, tmp_path=tmp_path)
    record = api.get(f"{TARGETS}{hot.pk}/releases/").json()
    assert (record["current"], record["last_good"]) == ("r2", "r1")
    assert [h["to_release"] for h in record["history"]] == ["r2", "r1"]
    # No key rolls back, whatever the target (issue 37): nothing is queued.
    for target_id in (plain.pk, hot.pk, 999999):
        refused = api.post(f"{TARGETS}{target_id}/rollback/", {}, format="json")
        assert refused.status_code == 403 and refused.json()["code"] == "person_required", refused.content
    assert not ReleaseRollback.objects.exists()
    try:
        # An owner rolls back on the releases page (a worker runs it, here eagerly on commit); the API follows it.
        with django_capture_on_commit_callbacks(execute=True):
            client_for(owner).post(f"/p/{project.slug}/evolution/releases/{hot.pk}/rollback/", {})
        rollback = ReleaseRollback.objects.get(target=hot)
        done = api.get(f"{TARGETS}{hot.pk}/rollbacks/{rollback.pk}/").json()
        assert (done["status"], done["outcome"], done["active_release"]) == ("succeeded", "rolled_back", "r1"), done
        assert (done["from_release"], done["to_release"]) == ("r2", None)
    finally:
        activator_stop(hot)
    record = api.get(f"{TARGETS}{hot.pk}/releases/").json()
    assert record["current"] == "r1" and record["history"][0]["kind"] == "manual"
    assert record["history"][0]["reason"].startswith(f"manual rollback by {owner.email}")


def test_evolve_on_an_insight_with_a_fix_on_its_way_needs_confirm(api, project, router_target, refund_insight,
                                                                  script):
    """A PR pushed and not marked merged is a fix on its way: starting another job on the insight is a 409 naming
    it until the client confirms."""
    EvolutionJob.objects.create(project=project, target=router_target, insight=refund_insight,
                                backend_name="scripted", state="PR_OPENED", pr_branch="evo/1/1")
    refused = api.post(JOBS, _job_body(router_target, refund_insight, script), format="json")
    assert refused.status_code == 409, refused.content
    body = refused.json()
    assert body["code"] == "insight_fix_exists" and "evo/1/1" in body["message"] and "confirm" in body["message"]
    assert body["extra"]["fix"]["kind"] == "pending"
    started = api.post(JOBS, _job_body(router_target, refund_insight, script, confirm=True), format="json")
    assert started.status_code == 201, started.content
    assert started.json()["base_release"] is None and started.json()["release_rolled_back"] is False


def test_a_rollback_is_claimed_once_and_one_runs_per_target(project, owner, tmp_path):
    """A redelivered rollback message does nothing (the queued row is claimed by a conditional update); a second
    request while one is queued is a 409."""
    from clear.errors import ConflictError
    from evolution.models import EvolutionTarget, ReleaseRollback
    from evolution.services.rollbacks import release_rollback_request, release_rollback_run
    from tests.evolution.fixture_repo import CONFIG as ROUTER_CONFIG
    from tests.frontend.test_evolution_pages import HOT_SWAP, activator_stop, releases_made

    hot = EvolutionTarget.objects.create(project=project, name="hot", source="/x",
                                         config={**ROUTER_CONFIG, "hot_swap": HOT_SWAP})
    releases_made(target=hot, tmp_path=tmp_path)
    rollback = release_rollback_request(target=hot, user=owner)  # its task is sent on commit: never, here
    with pytest.raises(ConflictError, match="already rolling back"):
        release_rollback_request(target=hot, user=owner)
    try:
        assert release_rollback_run(rollback_id=rollback.pk) == "rolled_back"
        assert "not queued" in release_rollback_run(rollback_id=rollback.pk)
    finally:
        activator_stop(hot)
    rollback.refresh_from_db()
    assert (rollback.status, rollback.from_release, rollback.active_release) == ("succeeded", "r2", "r1")
    assert ReleaseRollback.objects.count() == 1
