"""A job's backend check may wait on the model server (the litellm backend probes its API base, an external one runs
its `--version` sandboxed): it runs before any transaction that starts the job, so no database lock is held meanwhile
(issue 25), for a job started, restarted or started from the command line."""

import json

import pytest
from django.core.management import call_command
from django.db import connection

from evolution.backends.scripted import ScriptedBackend
from evolution.models import EvolutionJob
from evolution.services import stages
from evolution.services.api_actions import evolution_job_create, evolution_job_restart
from tests.evolution.fixture_repo import FIXED_BRANCH, replace_edit
from tests.evolution.support import happy_entries, script_write

pytestmark = pytest.mark.django_db(transaction=True)  # in_atomic_block is then the code's own transactions only


@pytest.fixture
def checks(monkeypatch) -> list[bool]:
    """in_atomic_block at each backend check; the jobs are created, never run."""
    seen: list[bool] = []
    original = ScriptedBackend.preflight

    def preflight(self):
        seen.append(connection.in_atomic_block)
        return original(self)

    monkeypatch.setattr(ScriptedBackend, "preflight", preflight)
    monkeypatch.setattr(stages, "stage_enqueue", lambda **kwargs: None)
    return seen


def test_the_backend_check_runs_outside_any_transaction(checks, project, owner, router_target, refund_insight,
                                                        tmp_path):
    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    job = evolution_job_create(project=project, target=router_target, insight=refund_insight, backend_name="scripted",
                               backend_config={"script": json.loads(script.read_text())}, depth="shallow",
                               created_by=owner)
    assert checks == [False]

    EvolutionJob.objects.filter(pk=job.pk).update(state="CANCELLED")
    job.refresh_from_db()
    evolution_job_restart(job=job, user=owner)
    assert checks == [False, False]

    EvolutionJob.objects.filter(target=router_target).update(state="CANCELLED")
    call_command("evolution_job", "start", "--insight", str(refund_insight.pk), "--target", router_target.name,
                 "--backend", "scripted", "--script", str(script), "--depth", "shallow")
    assert checks == [False, False, False]
