"""Acceptance against the example agent (issue #10): a job on the mediator_race insight.

The target is the support desk as a standalone repository (`make-target-repo`: mediator_race and retry_loop built in,
misroute fixed). The insight holds the desk's own failing traces of the mediator_race tasks, stored through
ingestion as the OTLP endpoint would store them. The coding agent is scripted with the fixtures that ship with the
example (examples/support_desk/evolution/).
"""

from pathlib import Path

import pytest

from evolution.models import Iteration, TaskSpec, TrialRun
from evolution.services import evolution_job_start, evolution_target_add
from examples.support_desk.target_repo import target_repo_make
from tests.diagnosis.support import support_desk_ingest
from tests.evolution.support import insight_for_traces
from traces.models import Trace

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "examples" / "support_desk" / "evolution"
MEDIATOR_RACE = {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"}
MISROUTE = {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"}


@pytest.fixture
def desk_target(project, tmp_path):
    target_repo_make(dest=tmp_path / "desk")
    return evolution_target_add(operator=True, project=project, name="support-desk", source=str(tmp_path / "desk"))


@pytest.fixture
def mediator_race_insight(project):
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2",
                        task_ids=sorted(MEDIATOR_RACE))
    traces = list(Trace.objects.filter(project=project, outcome="failure"))
    assert {t.task_id for t in traces} == MEDIATOR_RACE
    return insight_for_traces(project=project, traces=traces, node="mediator",
                              title="The mediator drops a finding when two tool results complete together")


def _run(project, target, insight, fixture, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = evolution_job_start(project=project, target=target, insight=insight, backend_name="scripted",
                                  backend_config={"script_path": str(FIXTURES / fixture)}, depth="shallow",
                                  # The desk is deterministic per (task, seed): a second trial repeats the first.
                                  policy_overrides={"trials": 1, "max_iterations": 1})
    job.refresh_from_db()
    return job


def test_the_scripted_fix_is_promote_eligible_with_targets_fixed_and_no_regression(
        project, desk_target, mediator_race_insight, django_capture_on_commit_callbacks):
    job = _run(project, desk_target, mediator_race_insight, "mediator_race_fix.json",
               django_capture_on_commit_callbacks)
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    best = job.best_iteration
    assert best.verdict == "PROMOTE_ELIGIBLE"
    targets = set(TaskSpec.objects.filter(job=job, kind="target").values_list("task_id", flat=True))
    assert targets == MEDIATOR_RACE
    assert TaskSpec.objects.filter(job=job, kind="regression").count() == 22 - 4
    assert set(best.metrics["fixed"]) == MEDIATOR_RACE
    candidate = TrialRun.objects.filter(job=job, iteration=best)
    assert all(r.passed for r in candidate.filter(task__kind="target"))
    baseline = {r.task.task_id: r.passed for r in TrialRun.objects.filter(job=job, arm="baseline")}
    for run in candidate.filter(task__kind="regression"):
        assert run.passed >= baseline[run.task.task_id], run.task.task_id  # nothing that passed stopped passing
    assert all(rule["passed"] for rule in best.verdict_record.rules)


def test_the_fix_that_also_breaks_misroute_is_rejected_for_regression(
        project, desk_target, mediator_race_insight, django_capture_on_commit_callbacks):
    job = _run(project, desk_target, mediator_race_insight, "mediator_race_breaks_misroute.json",
               django_capture_on_commit_callbacks)
    assert (job.state, job.terminal_reason) == ("REJECTED", "regression"), job.error
    iteration = Iteration.objects.get(job=job, n=1)
    assert iteration.verdict == "REJECT_REGRESSION" and set(iteration.metrics["fixed"]) == MEDIATOR_RACE
    regressed = {r.task.task_id for r in TrialRun.objects.filter(job=job, iteration=iteration,
                                                                 task__kind="regression", passed=False)}
    assert regressed & MISROUTE and regressed <= MISROUTE | {"compare-two-invoices", "two-charges-this-month",
                                                             "invoices-and-next-charge"}
    flips = next(r for r in iteration.verdict_record.rules if r["name"] == "G2_no_flips")
    assert set(flips["value"]) == regressed & MISROUTE
