import atexit
import json
import os
import shutil
from pathlib import Path

import pytest

# The real-worker test's worker reads this from its environment; set before the (session) worker starts. One per
# process, always assigned: pytest's main process loads this file too when tests/evolution files are named on the
# command line, and xdist workers inherit its environment; with the value inherited, two workers (each with its own
# database, so each with a job 1) would share one jobs/1 directory.
WORKER_EVOLUTION_DIR = Path(__file__).resolve().parents[2] / "var" / f"test-evolution-{os.getpid()}"
os.environ["CLEAR_EVOLUTION_DIR"] = str(WORKER_EVOLUTION_DIR)
# Removed when the process ends (the browser tests under tests/frontend use it too, outside this folder's fixtures).
atexit.register(shutil.rmtree, WORKER_EVOLUTION_DIR, ignore_errors=True)

from evolution.services import evolution_target_add
from tests.evolution.fixture_repo import TARGET_TASKS, fixture_repo_make
from tests.evolution import support
from tests.evolution.support import failing_traces_ingest, insight_for_traces


@pytest.fixture(autouse=True)
def evolution_dir(tmp_path, settings):
    settings.CLEAR_EVOLUTION_DIR = tmp_path / "evolution"
    settings.CLEAR_EVOLUTION_MIN_SANDBOX = "subprocess"
    return settings.CLEAR_EVOLUTION_DIR


@pytest.fixture
def router_remote(tmp_path):
    """The fixture agent as a bare repository: the target's source and the remote PR branches go to."""
    return fixture_repo_make(tmp_path / "repo")


@pytest.fixture
def router_target(project, router_remote):
    return evolution_target_add(operator=True, project=project, name="router", source=str(router_remote))


@pytest.fixture
def refund_insight(project):
    traces = failing_traces_ingest(project=project, tasks=[(task, 7) for task in TARGET_TASKS])
    return insight_for_traces(project=project, traces=traces, title="Refund requests are routed to billing")


@pytest.fixture
def worker_evolution_dir(settings):
    """The real worker's evolution dir, with the defaults the worker runs with: the minimum sandbox is bwrap there
    (its environment sets none), and no local source root is open."""
    settings.CLEAR_EVOLUTION_DIR = Path(os.environ["CLEAR_EVOLUTION_DIR"])
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
def root_worker(celery_worker):
    """A key holder's findings need a worker with rights the sandbox lacks; run unprivileged, a test would prove
    nothing, so under CI (which runs as root) that is a failure, not a skip."""
    status = Path(f"/proc/{celery_worker.process.pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    if uid != 0 or os.geteuid() != 0:
        message = f"the worker runs as uid {uid}, not root: a read or a run with its rights would reach nothing secret"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return celery_worker


@pytest.fixture
def key_holder(project, owner):
    """A holder of nothing but a project API key (created by the project's owner)."""
    from rest_framework.test import APIClient

    from clear.projects.services import api_key_create

    key = api_key_create(project=project, name="ci", created_by=owner)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")


@pytest.fixture
def secret_file(tmp_path) -> Path:
    """A file only root may read, outside the folder, with a marker (and a JSON shape, for readers that parse)."""
    path = tmp_path / "host" / "secret.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"clusters": [{"title": support.SECRET, "root_cause": support.SECRET}], "changes": [support.SECRET]}))
    path.chmod(0o600)
    return path


@pytest.fixture
def api(issued_key):
    """A client with the project's API key."""
    from rest_framework.test import APIClient

    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


@pytest.fixture
def roots(settings, tmp_path):
    """The operator opened the test's directory for sources (the fixture router lives at tmp_path/repo/remote.git)."""
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    return tmp_path
