"""Stage and iteration status follow what happened (issue 25, item 5): a role process that exits non-zero or times
out fails its stage; a job that ends closes its iteration and any stage still open, so `evolution_job status`, the
API and the job page never say "running" for a finished job."""

import re
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from evolution.models import EvolutionJob, Iteration, JobState, StageRun
from evolution.services import evolution_job_start
from evolution.services.jobs import evolution_job_fail, job_transition
from evolution.services.stages import stage_execute
from tests.evolution.fixture_repo import CONFIG
from tests.evolution.support import script_write

pytestmark = pytest.mark.django_db


def _status(job_id: int) -> str:
    out = StringIO()
    call_command("evolution_job", "status", str(job_id), stdout=out)
    return out.getvalue()


def _start(project, target, insight, tmp_path, entries, policy, **options):
    script = script_write(tmp_path / f"script-{uuid.uuid4().hex[:6]}.json", entries)
    return evolution_job_start(project=project, target=target, insight=insight, backend_name="scripted",
                               backend_config={"script_path": str(script)}, policy_overrides=policy, **options)


@pytest.mark.parametrize(("entry", "policy", "exit_code", "timed_out"), [
    ({"exit_code": 1}, {}, 1, False),
    ({"sleep_s": 5}, {"role_timeouts_s": {"locator": 0.3}}, 124, True),
], ids=["exit-1", "timeout"])
def test_a_locate_role_that_fails_fails_its_stage_and_the_job_shows_nowhere_running(
        project, owner, issued_key, router_target, refund_insight, tmp_path, client,
        django_capture_on_commit_callbacks, entry, policy, exit_code, timed_out):
    entries = [{"role": "locator", "iteration": "*", "round": "*", **entry}]
    with django_capture_on_commit_callbacks(execute=True):
        job = _start(project, router_target, refund_insight, tmp_path, entries, {"trials": 1, **policy})
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == (JobState.FAILED, "backend_failed"), job.error

    locate = StageRun.objects.get(job=job, stage="locate")
    assert (locate.status, locate.exit_code, locate.timed_out) == ("failed", exit_code, timed_out)
    assert locate.finished_at is not None and locate.outcome == "BACKEND_FAILED"
    assert not StageRun.objects.filter(job=job, status=StageRun.Status.RUNNING).exists()
    assert Iteration.objects.get(job=job, n=1).status == Iteration.Status.FAILED

    out = _status(job.pk)
    assert "running" not in out and "iteration 1: failed" in out, out

    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    stages = {s["stage"]: s for s in api.get(f"/api/v1/evolution/jobs/{job.pk}/").json()["stages"]}
    assert (stages["locate"]["status"], stages["locate"]["exit_code"]) == ("failed", exit_code)

    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/evolution/jobs/{job.pk}/").content.decode()
    row = page.split('<tr data-stage="locate">', 1)[1].split("</tr>", 1)[0]
    assert "failed" in row and "succeeded" not in row and "running" not in row


@pytest.mark.parametrize("end", ["failed", "cancelled"])
def test_a_job_that_ends_closes_its_iteration_and_any_stage_left_running(project, router_target, refund_insight,
                                                                          end):
    job = EvolutionJob.objects.create(project=project, target=router_target, insight=refund_insight,
                                      backend_name="scripted", state=JobState.LOCATING, current_iteration=1,
                                      config_snapshot={"policy": {}, "target": CONFIG})
    it = Iteration.objects.create(job=job, n=1, base_commit="0" * 40)
    orphan = StageRun.objects.create(job=job, iteration=it, iteration_n=1, stage="locate", claim="x")
    assert "iteration 1: running" in _status(job.pk)

    if end == "failed":
        evolution_job_fail(job_id=job.pk, reason="worker_lost", error="gone")
    else:
        job_transition(job_id=job.pk, from_states=[JobState.LOCATING], to_state=JobState.CANCELLED, actor="test",
                       event="cancelled", terminal_reason="cancelled")

    it.refresh_from_db()
    orphan.refresh_from_db()
    assert it.status == Iteration.Status.FAILED and it.failure_reason
    assert orphan.status == StageRun.Status.FAILED and orphan.finished_at is not None and orphan.outcome
    out = _status(job.pk)
    assert "running" not in out, out


def test_status_of_a_finished_job_with_a_stale_iteration_row_does_not_say_running(project, router_target,
                                                                                  refund_insight):
    # Rows written before the fix (or by a process that died) may still say running under a finished job.
    job = EvolutionJob.objects.create(project=project, target=router_target, insight=refund_insight,
                                      backend_name="scripted", state=JobState.FAILED, current_iteration=1,
                                      terminal_reason="backend_failed", config_snapshot={"policy": {}, "target": CONFIG})
    Iteration.objects.create(job=job, n=1, base_commit="0" * 40)
    out = _status(job.pk)
    assert "iteration 1: running" not in out and "iteration 1: failed" in out, out


def test_while_baseline_waits_for_its_worker_the_timeline_shows_it_running(project, owner, router_target,
                                                                            refund_insight, tmp_path, client):
    # Issue 40: the page reloads when the job's state moves, before a worker has claimed the stage of the new state
    # (its StageRun row): BASELINE, which runs for minutes, showed only "prepare" until LOCATING.
    job = _start(project, router_target, refund_insight, tmp_path, [], {"trials": 1}, enqueue=False)
    assert stage_execute(job_id=job.pk, stage="prepare") == "done"
    job.refresh_from_db()
    assert job.state == JobState.BASELINE
    assert list(StageRun.objects.filter(job=job).values_list("stage", "status")) == [("prepare", "succeeded")]

    client.force_login(owner)
    url = f"/p/{project.slug}/evolution/jobs/{job.pk}/"
    page = client.get(url).content.decode()
    assert re.findall(r'<tr data-stage="([a-z_]+)"', page) == ["prepare", "baseline"]
    row = page.split('<tr data-stage="baseline">', 1)[1].split("</tr>", 1)[0]
    assert "running" in row and "succeeded" not in row and "failed" not in row, row
    assert re.search(r'<td class="nowrap small">\d\d:\d\d:\d\d</td>', row), row  # since the job moved into BASELINE

    # Once the worker claims it, the timeline shows that row, once.
    StageRun.objects.create(job=job, stage="baseline", claim="worker", isolation_level=job.sandbox_level)
    page = client.get(url).content.decode()
    assert re.findall(r'<tr data-stage="([a-z_]+)"', page) == ["prepare", "baseline"]
    assert "running" in page.split('<tr data-stage="baseline">', 1)[1].split("</tr>", 1)[0]
