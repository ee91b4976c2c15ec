"""Issue 22's findings, replayed by a holder of nothing but a project's API key against a real Celery worker and the
real bubblewrap sandbox, with the server's default minimum (bwrap). Each of these got through before the change:
commands ran as root on the worker and printed its SECRET_KEY; subprocess-level targets ran unconfined; bwrap reached
Postgres through its Unix socket and read /etc/shadow; api_key_env handed out any of the worker's variables."""

import json
import os
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from evolution.models import EvolutionJob, EvolutionTarget, StageRun
from evolution.services import evolution_job_start
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, replace_edit
from tests.evolution.support import happy_entries

TARGETS = "/api/v1/evolution/targets/"
JOBS = "/api/v1/evolution/jobs/"
TERMINAL = {"FAILED", "CANCELLED", "REJECTED", "EXPIRED", "PR_OPENED", "PROMOTED", "ROLLED_BACK"}

pytestmark = [pytest.mark.worker]


@pytest.fixture
def worker_evolution_dir(settings):
    settings.CLEAR_EVOLUTION_DIR = Path(os.environ["CLEAR_EVOLUTION_DIR"])
    # The worker process runs with the defaults: the minimum sandbox is bwrap there (its environment sets none).
    assert "CLEAR_EVOLUTION_MIN_SANDBOX" not in os.environ
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "bwrap"
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = []
    return settings.CLEAR_EVOLUTION_DIR


@pytest.fixture
def require_bwrap():
    from evolution.sandbox import IsolationLevel, sandbox_problems

    problem = sandbox_problems()[IsolationLevel.BWRAP]
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bubblewrap does not work here: {problem}")
        pytest.skip(f"bubblewrap does not work here: {problem}")


@pytest.fixture
def key_holder(project, owner):
    key = api_key_create(project=project, name="ci", created_by=owner)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def _wait_terminal(job: EvolutionJob, worker, timeout: float = 180) -> EvolutionJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in TERMINAL or job.state == "AWAITING_CONSENT":
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job.pk} still {job.state}: {worker.log()[-3000:]}")


def _probe_command(worker_pid: int) -> str:
    # What the finding's attacker ran, reporting to stderr (the job's error keeps its tail), then failing.
    return ("sh -c 'echo uid=$(id -u) >&2; tr \"\\000\" \"\\n\" < /proc/" + str(worker_pid) + "/environ >&2; "
            "cat /etc/shadow >&2; "
            "python -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect(\\\"/var/run/postgresql/"
            ".s.PGSQL.5432\\\"); print(\\\"PG-CONNECTED\\\")\" >&2; "
            "python -c \"import socket; socket.create_connection((\\\"127.0.0.1\\\", 5432), timeout=3); "
            "print(\\\"TCP-CONNECTED\\\")\" >&2; echo PROBE-DONE >&2; exit 3'")


def _register(client, *, source: Path, config: dict, name: str = "router"):
    return client.post(TARGETS, {"name": name, "source": str(source), "config": config}, format="json")


def test_finding_1_a_key_holders_commands_never_run_as_root_or_see_the_server_secrets(
        celery_worker, worker_evolution_dir, require_bwrap, key_holder, project, router_remote, refund_insight,
        settings, tmp_path):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    hostile = {**CONFIG, "install_command": _probe_command(celery_worker.process.pid)}

    only_subprocess = _register(key_holder, source=router_remote, config={**hostile, "sandbox_levels": ["subprocess"]})
    assert only_subprocess.status_code == 400, only_subprocess.content
    assert "bwrap" in only_subprocess.json()["message"]

    response = _register(key_holder, source=router_remote, config={**hostile, "sandbox_levels": ["subprocess", "bwrap"]})
    assert response.status_code == 201, response.content
    assert response.json()["config"]["sandbox_levels"] == ["bwrap"]  # the level below the minimum is dropped
    target = EvolutionTarget.objects.get(pk=response.json()["id"])

    body = {"target": target.pk, "insight": refund_insight.pk, "backend": "scripted", "depth": "shallow",
            "backend_config": {"script": {"entries": happy_entries(replace_edit(FIXED_BRANCH))}}}
    created = key_holder.post(JOBS, body, format="json")
    assert created.status_code in (201, 202), created.content
    job = _wait_terminal(EvolutionJob.objects.get(pk=created.json()["id"]), celery_worker)

    assert job.state == "FAILED" and job.sandbox_level == "bwrap", (job.state, job.error)
    assert "PROBE-DONE" in job.error, job.error
    assert "uid=0" not in job.error and "uid=" in job.error
    assert django_settings.SECRET_KEY not in job.error
    assert "SECRET_KEY=" not in job.error and "DATABASE_URL=" not in job.error
    assert "root:" not in job.error  # /etc/shadow's first line
    assert "PG-CONNECTED" not in job.error and "TCP-CONNECTED" not in job.error


def test_finding_2_a_subprocess_only_target_ends_before_any_command_runs(
        celery_worker, worker_evolution_dir, require_bwrap, project, owner, router_remote, refund_insight, tmp_path):
    marker = tmp_path / "ran-unconfined"
    # Registered before the minimum was raised (or by the operator): the stored config allows only subprocess.
    config = {**CONFIG, "sandbox_levels": ["subprocess"], "install_command": f"touch {marker}"}
    target = EvolutionTarget.objects.create(project=project, name="legacy", source=str(router_remote), config=config)
    job = evolution_job_start(project=project, target=target, insight=refund_insight, backend_name="scripted",
                              backend_config={"script": {"entries": happy_entries(replace_edit(FIXED_BRANCH))}},
                              policy_overrides={"trials": 1})
    job = _wait_terminal(job, celery_worker)

    assert job.state == "FAILED", (job.state, job.error)
    assert "sandbox_below_minimum" in job.terminal_reason
    assert "below this server's minimum bwrap" in job.error
    assert not marker.exists()
    assert list(StageRun.objects.filter(job=job).values_list("stage", flat=True)) == ["prepare"]
    assert not job.base_commit  # not even the worktree was made

    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/p/{project.slug}/evolution/jobs/{job.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "below this server&#x27;s minimum bwrap" in text or "below this server's minimum bwrap" in text


def test_finding_3_bwrap_reaches_neither_the_database_socket_nor_shadow(
        celery_worker, worker_evolution_dir, require_bwrap, project, router_remote, refund_insight):
    config = {**CONFIG, "sandbox_levels": ["bwrap"], "install_command": _probe_command(celery_worker.process.pid)}
    target = EvolutionTarget.objects.create(project=project, name="probe", source=str(router_remote), config=config)
    job = evolution_job_start(project=project, target=target, insight=refund_insight, backend_name="scripted",
                              backend_config={"script": {"entries": happy_entries(replace_edit(FIXED_BRANCH))}},
                              policy_overrides={"trials": 1})
    job = _wait_terminal(job, celery_worker)

    assert job.state == "FAILED" and "PROBE-DONE" in job.error, job.error
    assert "PG-CONNECTED" not in job.error and "root:" not in job.error
    assert "No such file or directory" in job.error  # neither the socket nor /etc/shadow exists in there


def test_finding_4_a_key_holder_names_no_server_path(key_holder, project, router_remote, outsider_project, settings,
                                                   tmp_path):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = []
    theirs = EvolutionTarget.objects.create(project=outsider_project, name="theirs", source=str(router_remote),
                                            config=CONFIG)
    mirror = Path(settings.CLEAR_EVOLUTION_DIR) / "repos" / f"{theirs.pk}.git"
    for source in (str(router_remote), str(mirror), str(django_settings.BASE_DIR), "var/evolution/repos/1.git",
                   "/" + "a" * 300, "/x/" * 2000, "file:///etc", f"{tmp_path}/\x00"):
        response = _register(key_holder, source=Path(source) if "\x00" not in source else source, config=CONFIG)
        assert response.status_code == 400, (source[:80], response.status_code, response.content[:300])
        message = response.json()["message"]
        assert "git clone" not in message and "git -c" not in message and "/tmp/" not in message, message
        assert str(django_settings.BASE_DIR) not in message, message
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    # Under an opened root, another project's repository is still refused.
    response = _register(key_holder, source=router_remote, config=CONFIG, name="same-repo")
    assert response.status_code == 400, response.content


def test_finding_5_api_key_env_and_hot_swap_are_the_operators(key_holder, project, router_remote, refund_insight,
                                                               settings, tmp_path):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    hot = {**CONFIG, "hot_swap": {"activator": {"kind": "process", "command": "sh -c id"},
                                  "preflight_commands": ["sh -c 'id > /tmp/owned'"],
                                  "probes": [{"kind": "command", "command": "sh -c id", "timeout_s": 5}]}}
    response = _register(key_holder, source=router_remote, config=hot)
    assert response.status_code == 400 and "hot_swap" in json.dumps(response.json()), response.content
    assert not EvolutionTarget.objects.exists()

    response = _register(key_holder, source=router_remote, config=CONFIG)
    assert response.status_code == 201, response.content
    for backend, config in (("external", {"template": "claude", "api_key_env": "SECRET_KEY"}),
                            ("litellm", {"model": "openai/x", "api_key_env": "DATABASE_URL"})):
        created = key_holder.post(JOBS, {"target": response.json()["id"], "insight": refund_insight.pk,
                                         "backend": backend, "backend_config": config}, format="json")
        assert created.status_code == 400, created.content
        assert "api_key_env" in json.dumps(created.json())
    assert not EvolutionJob.objects.exists()


def test_a_key_goes_only_to_a_model_host_the_operator_lists(key_holder, project, router_remote, refund_insight,
                                                            settings, tmp_path):
    # An allowed key variable with a model URL of the key holder's choosing would hand the key to that host (and the
    # litellm backend would call an internal address from the worker).
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    target = _register(key_holder, source=router_remote, config=CONFIG).json()["id"]
    for backend, config, field in (
            ("external", {"template": "claude", "model_url": "https://collector.attacker.invalid"}, "model_url"),
            ("external", {"template": "custom", "command": "agent", "api_key_env": "OPENAI_API_KEY",
                          "model_url": "http://169.254.169.254"}, "model_url"),
            ("litellm", {"model": "openai/x", "api_key_env": "OPENAI_API_KEY",
                         "api_base": "http://127.0.0.1:5432/v1"}, "api_base")):
        created = key_holder.post(JOBS, {"target": target, "insight": refund_insight.pk, "backend": backend,
                                         "backend_config": config}, format="json")
        assert created.status_code == 400, created.content
        assert f"backend_config.{field}" in created.json()["extra"]["fields"], created.json()
    assert not EvolutionJob.objects.exists()
    settings.CLEAR_EVOLUTION_MODEL_HOSTS = ["127.0.0.1:5432"]
    created = key_holder.post(JOBS, {"target": target, "insight": refund_insight.pk, "backend": "litellm",
                                     "backend_config": {"model": "openai/x", "api_base": "http://127.0.0.1:5432/v1"}},
                              format="json")
    assert "backend_config.api_base" not in json.dumps(created.json()), created.content
