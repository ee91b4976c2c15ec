"""Issue 40, item 2: the day's continuous run does not judge again what a full run judged with the same judges and
model (it takes that run's verdicts, spending nothing), lists only the judges it runs, and a release's trend is
described by a run that judged all of it, a partial one marked as such."""

from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.insights.trend import trend_refresh
from diagnosis.models import DiagnosisRun, Feedback, Insight, RunTrace
from diagnosis.services import continuous_tick
from diagnosis.services import runs as runs_module
from diagnosis.services.insights_refresh import insights_refresh, insights_refresh_request
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from traces.models import Trace

pytestmark = pytest.mark.django_db

TASKS = ["refund-status", "refund-damaged-item", "compare-two-invoices", "return-policy", "two-orders-status"]


@pytest.fixture
def quiet(settings):
    settings.CLEAR_TRACE_QUIET_SECONDS = 30
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_CONTINUOUS_JUDGES = []  # the defaults, as the demo has them


def _verdicts(run) -> list[tuple]:
    return sorted(Feedback.objects.filter(run=run).values_list("trace_id", "judge", "target_span_id", "verdict",
                                                                 "critique"))


def test_a_continuous_run_takes_the_full_runs_verdicts_instead_of_judging_again(project, quiet, desk_rubrics,
                                                                                 monkeypatch):  # noqa: F811
    support_desk_ingest(project=project, bugs="all", release="v1", task_ids=TASKS)
    full = diagnose(project, "")
    judged = []
    original = runs_module.trace_results
    monkeypatch.setattr(runs_module, "trace_results", lambda **kw: judged.append(kw["trace"]) or original(**kw))
    assert continuous_tick(now=timezone.now() + timedelta(seconds=31)) == len(TASKS)
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert judged == []  # nothing judged again
    assert (run.done_count, run.input_tokens, run.cost) == (len(TASKS), 0, 0)
    assert "contrastive" not in run.judges and "contrastive" in full.judges  # it never runs on a rolling day
    copied = _verdicts(run)
    assert copied and copied == [v for v in _verdicts(full) if v[1] != "contrastive"]

    # A trace whose content changed since the full run judged it is judged again.
    changed = Trace.objects.get(project=project, task_id="return-policy")
    Trace.objects.filter(pk=changed.pk).update(content_changed_at=timezone.now() + timedelta(seconds=1))
    item = RunTrace.objects.get(run=run, trace=changed)
    RunTrace.objects.filter(pk=item.pk).update(status=RunTrace.Status.QUEUED)
    Feedback.objects.filter(run=run, trace=changed).delete()
    DiagnosisRun.objects.filter(pk=run.pk).update(done_count=len(TASKS) - 1)
    runs_module.run_trace_process(item_id=item.pk, dispatch_next=False)
    assert [t.trace_id for t in judged] == [changed.trace_id]


def test_without_a_full_run_the_continuous_run_judges(project, quiet):
    support_desk_ingest(project=project, bugs="all", release="v1", task_ids=TASKS[:2])
    assert continuous_tick(now=timezone.now() + timedelta(seconds=31)) == 2
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert run.done_count == 2 and Feedback.objects.filter(run=run).exists()


def test_a_partial_run_never_replaces_a_complete_one_in_the_trend(project, quiet, desk_rubrics, settings):  # noqa: F811
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    full = diagnose(project, "")
    misroute = Insight.objects.get(project=project, level="system", is_other=False, title__contains="intent: refund")
    before = next(t for t in misroute.trend if t["release"] == "v1")
    assert before["count"] == 4 and before["judged"] == 22 and "partial" not in before

    # The continuous run has judged 3 of v1's 22 traces (the rest wait): its figures do not stand for v1.
    settings.CLEAR_TASKS_INLINE = False
    continuous = DiagnosisRun.objects.create(project=project, continuous=True, continuous_key="k", name="c",
                                             status="running", judges=full.judges, insights_status="done",
                                             insights_summary={"judged_by_release": {"v1": 3}})
    traces = list(Trace.objects.filter(project=project).order_by("pk"))
    RunTrace.objects.bulk_create([RunTrace(run=continuous, trace=t, status="done" if i < 3 else "pending")
                                  for i, t in enumerate(traces)])
    trend_refresh(project_id=project.pk)
    misroute.refresh_from_db()
    assert next(t for t in misroute.trend if t["release"] == "v1") == before

    # Issue 44 (test_demo.py's figures test, red once): the continuous run claims traces batch by batch, so after
    # its first batch it has no RunTrace at all for the rest, none open, and it has still judged only part of v1.
    RunTrace.objects.filter(run=continuous, status="pending").delete()
    trend_refresh(project_id=project.pk)
    misroute.refresh_from_db()
    assert next(t for t in misroute.trend if t["release"] == "v1") == before

    # With no complete run of a release, the partial one is shown, marked.
    full.insights_status = "failed"
    full.save(update_fields=["insights_status"])
    trend_refresh(project_id=project.pk)
    misroute.refresh_from_db()
    row = next(t for t in misroute.trend if t["release"] == "v1")
    assert row["partial"] is True and (row["judged"], row["of"]) == (3, 22)


def test_a_gate_run_never_stands_for_a_release_in_the_trend(project, quiet, desk_rubrics):  # noqa: F811
    """The demo after `clearctl gate --release v2 --baseline-release v1`: the gate's runs judged both releases
    completely but keep their clusters on the run (detached), so no insight has figures in them; taken as the newest
    runs of v1 and v2, they made the misroute's trend read 0 of 22 in v1, where the full run found it in 4."""
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    diagnose(project, "")
    misroute = Insight.objects.get(project=project, level="system", is_other=False, title__contains="intent: refund")
    before = next(t for t in misroute.trend if t["release"] == "v1")
    assert before["count"] == 4 and before["judged"] == 22

    gate = diagnose(project, "v1", purpose=DiagnosisRun.Purpose.GATE)
    assert gate.insights_summary["detached"] and gate.insights_summary["judged_by_release"] == {"v1": 22}
    trend_refresh(project_id=project.pk)
    misroute.refresh_from_db()
    assert next(t for t in misroute.trend if t["release"] == "v1") == before


def test_a_trace_a_running_full_run_judges_waits_for_it(project, quiet, monkeypatch):
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start

    support_desk_ingest(project=project, bugs="all", release="v1", task_ids=TASKS[:2])
    full = diagnosis_run_start(project=project, release="v1", enqueue=False)
    DiagnosisRun.objects.filter(pk=full.pk).update(status="running")
    assert continuous_tick(now=timezone.now() + timedelta(seconds=31)) == 0  # being judged by the full run
    DiagnosisRun.objects.filter(pk=full.pk).update(status="queued")
    full = diagnosis_run_execute(run=DiagnosisRun.objects.get(pk=full.pk))
    assert full.status == "succeeded"
    judged = []
    original = runs_module.trace_results
    monkeypatch.setattr(runs_module, "trace_results", lambda **kw: judged.append(kw["trace"]) or original(**kw))
    assert continuous_tick(now=timezone.now() + timedelta(seconds=31)) == 2
    assert judged == [] and DiagnosisRun.objects.get(project=project, continuous=True).done_count == 2


def test_an_early_refresh_over_part_of_the_day_leaves_no_bug_in_other(project, quiet, settings):
    """The demo on a busy machine: the continuous run's first re-clustering saw a few traces and put their statements
    in "other" buckets (too few to cluster); later re-clusterings placed them in the insights, and the emptied
    buckets ("Other feedback at planner", …) stayed as rows beside the bugs. An emptied bucket is no row."""
    from diagnosis.services.rubrics import rubric_create_demo_set
    from diagnosis.selectors import insight_list

    rubric_create_demo_set(project=project)
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    diagnose(project, "")
    rows = [(i.pk, i.title) for i in insight_list(project=project, nested=True)]
    assert len(rows) == 3, rows
    settings.CLEAR_CONTINUOUS_BATCH = 5
    at = timezone.now() + timedelta(seconds=31)
    assert continuous_tick(now=at) == 5
    run = DiagnosisRun.objects.get(project=project, continuous=True)

    def recluster() -> None:
        insights_refresh(run_id=run.pk)  # the one the beat queued, if any
        assert insights_refresh_request(run_id=run.pk, force=True, recluster=True)
        assert insights_refresh(run_id=run.pk)["refresh"]["kind"] == "full"

    recluster()
    settings.CLEAR_CONTINUOUS_BATCH = 500
    assert continuous_tick(now=at + timedelta(seconds=1)) == 39
    recluster()
    recluster()
    assert [(i.pk, i.title) for i in insight_list(project=project, nested=True)] == rows
