import atexit
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

