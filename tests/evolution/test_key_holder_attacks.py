"""Issue 22's and issue 37's findings, replayed by a holder of nothing but a project's API key against a real Celery
worker and the real bubblewrap sandbox, with the server's default minimum (bwrap). Each of these got through before
its change: commands ran as root on the worker and printed its SECRET_KEY; subprocess-level targets ran unconfined;
bwrap reached Postgres through its Unix socket and read /etc/shadow; api_key_env handed out any of the worker's
variables; the worker read a trial's output folder (and a coding CLI's scratch dir) as root, following the links the
sandbox planted; an approved live release ran on the host as root with the worker's environment."""

import json
import os
import pwd
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from evolution.models import EvolutionJob, EvolutionTarget, StageRun
from evolution.services import evolution_job_start
from evolution.deploy import hot_swap_config_validate, release_current_get
from evolution.services import evolution_job_consent, evolution_target_add
from evolution.services.hot_swap import releases_root
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, _git, fixture_repo_make, replace_edit
from tests.evolution.support import SECRET, happy_entries, target_register

TARGETS = "/api/v1/evolution/targets/"
JOBS = "/api/v1/evolution/jobs/"
TERMINAL = {"FAILED", "CANCELLED", "REJECTED", "EXPIRED", "PR_OPENED", "PROMOTED", "ROLLED_BACK"}

pytestmark = [pytest.mark.worker]





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


def _register(client, *, source: Path, config: dict | None, name: str = "router", worker=None):
    """POST a registration and let the clone it sends run: eagerly here, or on the real worker (waited for)."""
    response, _ = target_register(client, {"name": name, "source": str(source), "config": config})
    if response.status_code == 201 and worker is not None:
        target_id = response.json()["id"]
        deadline = time.monotonic() + 60
        while EvolutionTarget.objects.filter(pk=target_id, state="cloning").exists():
            assert time.monotonic() < deadline, f"target {target_id} still cloning: {worker.log()[-3000:]}"
            time.sleep(0.2)
    return response


def _target(response) -> EvolutionTarget:
    assert response.status_code == 201, response.content
    return EvolutionTarget.objects.get(pk=response.json()["id"])


def test_finding_1_a_key_holders_commands_never_run_as_root_or_see_the_server_secrets(
        celery_worker, worker_evolution_dir, require_bwrap, key_holder, project, router_remote, refund_insight,
        settings, tmp_path):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    probe = _probe_command(celery_worker.process.pid)
    # A key sets no command (issue 37): the holder commits the hostile one to the repository's own evolution.json.
    sent = _target(_register(key_holder, source=router_remote, config={**CONFIG, "install_command": probe},
                             name="sent", worker=celery_worker))
    assert sent.state == "failed" and "config.install_command" in sent.state_reason, sent.state_reason

    only_subprocess = fixture_repo_make(tmp_path / "subprocess-only",
                                        config_overrides={"install_command": probe, "sandbox_levels": ["subprocess"]})
    refused = _target(_register(key_holder, source=only_subprocess, config=None, name="refused",
                                worker=celery_worker))
    assert refused.state == "failed" and "bwrap" in refused.state_reason, refused.state_reason

    hostile = fixture_repo_make(tmp_path / "hostile", config_overrides={"install_command": probe,
                                                                         "sandbox_levels": ["subprocess", "bwrap"]})
    target = _target(_register(key_holder, source=hostile, config=None, worker=celery_worker))
    assert target.state == "ready", (target.state, target.state_reason)
    assert target.config["install_command"] == probe
    assert target.config["sandbox_levels"] == ["bwrap"]  # the level below the minimum is dropped

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
    # Listing it is not enough for plain http on a loopback address: the operator allows those too.
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = settings.CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE = True
    created = key_holder.post(JOBS, {"target": target, "insight": refund_insight.pk, "backend": "litellm",
                                     "backend_config": {"model": "openai/x", "api_base": "http://127.0.0.1:5432/v1"}},
                              format="json")
    assert "backend_config.api_base" not in json.dumps(created.json()), created.content


# --- replayed by a key holder against a real worker and real bwrap ----------------------------------------------------






def _hostile_repo(dest: Path, **commands: str) -> Path:
    """The fixture agent whose own evolution.json names the hostile commands (a key holder registers it without a
    config, so the repository's file is what is read); the sandbox levels are left to the server's default."""
    work = fixture_repo_make(dest, bare=False)
    config = {key: value for key, value in CONFIG.items() if key != "sandbox_levels"}
    (work / "evolution.json").write_text(json.dumps({**config, **commands}, indent=2))
    _git(work, "commit", "-q", "-am", "the key holder's commands")
    remote = dest / "remote.git"
    _git(dest, "clone", "-q", "--bare", str(work), str(remote))
    return remote


def _run_job(client, *, source: Path, insight, worker, backend: str, backend_config: dict,
             timeout: float = 240) -> tuple[EvolutionJob, list[tuple[dict, str]]]:
    registered = _register(client, source=source, config=None, name="hostile", worker=worker)
    assert _target(registered).state == "ready", _target(registered).state_reason
    created = client.post(JOBS, {"target": registered.json()["id"], "insight": insight.pk, "backend": backend,
                                 "depth": "shallow", "backend_config": backend_config}, format="json")
    assert created.status_code in (201, 202), created.content
    job = EvolutionJob.objects.get(pk=created.json()["id"])
    deadline = time.monotonic() + timeout
    while True:  # bounded: a worker stuck on a FIFO fails here instead of hanging the suite
        job.refresh_from_db()
        if job.state in TERMINAL or job.state == "AWAITING_CONSENT":
            break
        assert time.monotonic() < deadline, f"job {job.pk} still {job.state}: {worker.log()[-3000:]}"
        time.sleep(0.5)
    detail = client.get(f"{JOBS}{job.pk}/")
    assert detail.status_code == 200, detail.content
    artifacts = []
    for artifact in detail.json()["artifacts"]:
        download = client.get(f"{JOBS}{job.pk}/artifacts/{artifact['id']}/")
        assert download.status_code == 200, download.content
        artifacts.append((artifact, download.content.decode("utf-8", "replace")))
    return job, artifacts


def _assert_nothing_of_the_host(job: EvolutionJob, artifacts: list[tuple[dict, str]]) -> None:
    shadow = Path("/etc/shadow").read_text().splitlines()[0]
    database_url = os.environ.get("DATABASE_URL", "") or "postgres://"
    for artifact, text in [({"name": "job.error"}, job.error), *artifacts]:
        where = artifact["name"]
        assert SECRET not in text, where
        assert django_settings.SECRET_KEY not in text, where
        assert "SECRET_KEY=" not in text and "DATABASE_URL=" not in text, where
        assert shadow not in text and "root:" not in text, where
        assert database_url not in text, where


@pytest.mark.worker
def test_a_key_holders_trial_output_folder_yields_no_host_file_and_no_hang(
        root_worker, worker_evolution_dir, require_bwrap, key_holder, project, refund_insight, settings, tmp_path,
        secret_file):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    # The contained run's file size limit (512 MB) stops a 10 GB file; the largest it allows stands in for it.
    trial = ('sh -c "ln -s /proc/self/environ {out}/e; ln -s /etc/shadow {out}/s; ln -s ' + str(secret_file)
             + ' {out}/secret; ln -s / {out}/host-root; ln /etc/passwd {out}/h 2>/dev/null; mkfifo {out}/f; '
             "truncate -s 10G {out}/big 2>/dev/null || truncate -s 400M {out}/big; "
             'exec python -m router run-task --task {task_id} --seed {seed} --out {out}/result.json"')
    source = _hostile_repo(tmp_path / "hostile", trial_command=trial)
    job, artifacts = _run_job(key_holder, source=source, insight=refund_insight, worker=root_worker,
                              backend="scripted",
                              backend_config={"script": {"entries": happy_entries(replace_edit(FIXED_BRANCH))}})

    assert job.sandbox_level == "bwrap", (job.state, job.error)
    traces = [json.loads(text) for artifact, text in artifacts if artifact["kind"] == "trial_trace"]
    assert traces, (job.state, job.error, [a["kind"] for a, _ in artifacts])
    _assert_nothing_of_the_host(job, artifacts)
    for trace in traces:
        files = trace["files"]
        assert files["e"] == files["s"] == files["secret"] == files["host-root"] == "skipped: symbolic link"
        assert files["f"] == "skipped: not a regular file" and files["big"] == "skipped: larger than 1 MB"
        assert json.loads(files["result.json"])["task_id"]  # the honest result is still shown
    assert job.state in ("AWAITING_CONSENT", "FAILED", "REJECTED"), (job.state, job.error)


@pytest.mark.worker
def test_a_key_holders_coding_cli_scratch_dir_yields_no_host_file(
        root_worker, worker_evolution_dir, require_bwrap, key_holder, project, refund_insight, settings, tmp_path,
        secret_file):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    source = _hostile_repo(tmp_path / "hostile")
    # The custom template runs any command as the role, in the sandbox, its cwd the scratch dir the worker then
    # stores as the role's logs and reads its output file from. Doubled braces: the template formats placeholders.
    script = ("ln -s /proc/self/environ e; ln -s /etc/shadow s; ln -s " + str(secret_file) + " secret; "
              "ln -s " + str(secret_file) + " {output_file}; ln -s / host-root; mkfifo f; "
              "truncate -s 400M big; echo '{{\"clusters\": []}}'")
    job, artifacts = _run_job(key_holder, source=source, insight=refund_insight, worker=root_worker,
                              backend="external", backend_config={"template": "custom",
                                                                  "command": ["sh", "-c", script]})

    logs = {artifact["name"]: text for artifact, text in artifacts if artifact["kind"] == "log"}
    scratch = {name.split(".scratch/", 1)[1]: text for name, text in logs.items() if ".scratch/" in name}
    assert scratch, (job.state, job.error, sorted(logs))
    _assert_nothing_of_the_host(job, artifacts)
    assert scratch["e"] == scratch["s"] == scratch["secret"] == scratch["output.json"] == "skipped: symbolic link"
    assert scratch["host-root"] == "skipped: symbolic link"
    assert scratch["f"] == "skipped: not a regular file" and scratch["big"] == "skipped: larger than 1 MB"
    assert job.state in TERMINAL | {"AWAITING_CONSENT"}


# --- a live release (issue 37, path 2) ------------------------------------------------------------------------------

SETTLED = {"FAILED", "CANCELLED", "REJECTED", "EXPIRED", "PR_OPENED", "PROMOTED", "ROLLED_BACK", "AWAITING_CONSENT"}
AGENT_ENV = {"AGENT_MODE": "live", "AGENT_REGION": "eu"}
# The operator's hot-swap section: the agent imports the (patched) router and keeps beating in shared/.
AGENT = ("python -c 'import pathlib, time, router.agent\n"
         "while True:\n    pathlib.Path(\"../../shared/beat\").touch(); time.sleep(0.5)'")
HOT_SWAP = {
    "activator": {"kind": "process", "command": AGENT, "env": AGENT_ENV, "stop_timeout_s": 5},
    "preflight_commands": ["python -c 'import router.agent'"],
    "probes": [{"kind": "command", "command": "python health.py", "timeout_s": 20}, {"kind": "process_alive"},
               {"kind": "heartbeat", "path": "shared/beat", "max_age_s": 30}],
    "health": {"interval_s": 0.5, "window_s": 20, "passes_required": 2},
}
# What the key holder's candidate adds at the top of router/agent.py: it runs wherever the module is imported (the
# trials, the preflight, the probes and the live agent) and reports what it could reach to the heartbeat directory.
DOCSTRING = '"""Routes a support message to a queue."""\n'
ATTACK = DOCSTRING + '''
def _attack():
    import json, os, socket
    seen = {"uid": os.getuid(), "environ": dict(os.environ), "pid": os.getpid()}
    for name, path in (("shadow", "/etc/shadow"), ("state", "../../state.json"), ("agent_pid", "../../agent.pid")):
        try:
            seen[name] = open(path).read()[:200]
        except OSError as exc:
            seen[name] = "refused: " + type(exc).__name__
    for name, path in (("write_state", "../../state.json"), ("write_release", "agent_was_here")):
        try:
            open(path, "a").close()
            seen[name] = "written"
        except OSError as exc:
            seen[name] = "refused: " + type(exc).__name__
    try:
        os.symlink("/", "../../current.tmp")
        seen["swap_current"] = "written"
    except OSError as exc:
        seen["swap_current"] = "refused: " + type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
        seen["postgres"] = "connected"
    except OSError as exc:
        seen["postgres"] = "refused: " + type(exc).__name__
    try:
        os.makedirs("../../shared", exist_ok=True)
        with open("../../shared/attack-%d.json" % os.getpid(), "w") as handle:
            json.dump(seen, handle)
    except OSError:
        pass  # in a trial there is no heartbeat directory


_attack()
'''




@pytest.fixture
def live_target(project, router_remote, settings):
    settings.CLEAR_EVOLUTION_DIR = Path(os.environ["CLEAR_EVOLUTION_DIR"])  # the worker's
    assert "CLEAR_EVOLUTION_MIN_SANDBOX" not in os.environ  # the worker runs with the default minimum, bwrap
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "bwrap"
    target = evolution_target_add(operator=True, project=project, name="router-live", source=str(router_remote),
                                  config={**CONFIG, "hot_swap": HOT_SWAP})
    yield target
    hot_swap_config_validate(HOT_SWAP).build(releases_root=releases_root(target=target)).activator.stop()


def _settle(job: EvolutionJob, worker, timeout: float = 240) -> EvolutionJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in SETTLED:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job.pk} still {job.state}: {worker.log()[-3000:]}")


def _processes_in(release_dir: Path) -> dict[int, dict]:
    """Every process (bwrap itself aside) whose working directory is the release: uid and environment from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() == "bwrap":
                continue
            if os.path.realpath(f"/proc/{entry}/cwd") != str(release_dir):
                continue
            uid = int(next(line for line in Path(f"/proc/{entry}/status").read_text().splitlines()
                           if line.startswith("Uid:")).split()[1])
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except (OSError, StopIteration):
            continue
        environ = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
        found[int(entry)] = {"uid": uid, "environ": environ}
    return found


def test_an_approved_release_runs_as_the_sandbox_user_with_only_its_configured_environment(
        root_worker, require_bwrap, key_holder, live_target, project, owner, refund_insight):
    celery_worker = root_worker
    entries = happy_entries(replace_edit(FIXED_BRANCH))
    implementer = next(entry for entry in entries if entry["role"] == "implementer")
    implementer["edits"].append({"path": "router/agent.py", "replace": {"old": DOCSTRING, "new": ATTACK}})
    created = key_holder.post(JOBS, {"target": live_target.pk, "insight": refund_insight.pk, "backend": "scripted",
                                     "depth": "shallow", "mode": "hot_swap",
                                     "backend_config": {"script": {"entries": entries}}}, format="json")
    assert created.status_code in (201, 202), created.content
    job = _settle(EvolutionJob.objects.get(pk=created.json()["id"]), celery_worker)
    assert job.state == "AWAITING_CONSENT", (job.state, job.error)

    evolution_job_consent(job=job, user=owner, patch_sha256=job.best_iteration.patch_sha256)  # a person approves
    job = _settle(job, celery_worker)
    assert (job.state, job.terminal_reason) == ("PROMOTED", "healthy"), (job.state, job.error)

    root = releases_root(target=live_target)
    release_dir = (root / "releases" / release_current_get(releases_root=root)).resolve()
    processes = _processes_in(release_dir)
    assert processes, f"no process of the live release in {release_dir}"
    sandbox_uid = pwd.getpwnam(django_settings.CLEAR_EVOLUTION_SANDBOX_USER).pw_uid
    for pid, seen in processes.items():
        assert seen["uid"] == sandbox_uid, (pid, seen["uid"])
        assert set(seen["environ"]) == {*AGENT_ENV, "PATH", "HOME", "LANG"}, (pid, sorted(seen["environ"]))
        assert {name: seen["environ"][name] for name in AGENT_ENV} == AGENT_ENV

    reports = [json.loads(path.read_text()) for path in (root / "shared").glob("attack-*.json")]
    assert reports, "the candidate's code never ran in the live release"
    for report in reports:  # the preflight's, the probes' and the agent's own
        assert report["uid"] == sandbox_uid
        assert set(report["environ"]) == {*AGENT_ENV, "PATH", "HOME", "LANG"}, sorted(report["environ"])
        assert report["shadow"].startswith("refused") and report["state"].startswith("refused")
        assert report["agent_pid"].startswith("refused")
        assert report["write_state"].startswith("refused") and report["write_release"].startswith("refused")
        assert report["swap_current"].startswith("refused") and report["postgres"].startswith("refused")
    assert not (root / "current.tmp").exists() and not (release_dir / "agent_was_here").exists()
    text = json.dumps(reports)
    assert django_settings.SECRET_KEY not in text and "DATABASE_URL" not in text
