"""Issue 37, path 2: a key holder's patch that a person approved becomes a live release. Before the change it ran on
the host as the worker's user (root) with the worker's whole environment; now the agent, its preflight and its probes
run in the sandbox as the sandbox user, with exactly the configured variables plus PATH, HOME and LANG, no network,
and nothing writable outside the release but its heartbeat directory. Replayed against a real worker and bwrap."""

import json
import os
import pwd
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from evolution.deploy import hot_swap_config_validate, release_current_get
from evolution.models import EvolutionJob
from evolution.services import evolution_job_consent, evolution_target_add
from evolution.services.hot_swap import releases_root
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, replace_edit
from tests.evolution.support import happy_entries

pytestmark = [pytest.mark.worker]

JOBS = "/api/v1/evolution/jobs/"
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
def root_worker():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs the worker as root: this test proves a root worker's live release is not root")
        pytest.skip("the worker is not root here: there is no other user to hand the live release to")


@pytest.fixture
def require_bwrap():
    from evolution.sandbox import IsolationLevel, sandbox_problems

    problem = sandbox_problems()[IsolationLevel.BWRAP]
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bubblewrap does not work here: {problem}")
        pytest.skip(f"bubblewrap does not work here: {problem}")


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
        celery_worker, root_worker, require_bwrap, live_target, project, owner, refund_insight):
    key = api_key_create(project=project, name="ci", created_by=owner)
    key_holder = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
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
