"""How insight builds are started and read: the end of a run queues `diagnosis.build_insights` once, the task is
idempotent, `diagnose --inline` and `build_insights` build in-process, the sweep re-sends lost builds, and the
selectors filter and scope by project."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from diagnosis.insights.errors import InsightMergeInvalidError, InsightNotFoundError, InsightSplitInvalidError
from diagnosis.models import DiagnosisRun, Insight, InsightStatement
from diagnosis.selectors import insight_evidence_list, insight_get, insight_list, insight_statement_list, insight_trend
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from diagnosis.services.insights import insights_build, insights_sweep
from diagnosis.services.insights_review import (
    insight_confirm,
    insight_merge,
    insight_split,
    insight_status_set,
)
from diagnosis.tasks import build_insights as build_insights_task
from tests.diagnosis.insights.conftest import TOUCHED_BY, diagnose, insight_for_tasks
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk(project, desk_rubrics):
    support_desk_ingest(project=project, bugs="all", release="r1")
    return project


def test_a_finished_run_queues_its_build_once_and_the_task_is_idempotent(desk, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = diagnosis_run_start(project=desk, release="r1")  # eager Celery: start → judge → finish → insights
    run.refresh_from_db()
    assert run.status == "succeeded" and run.insights_status == "done" and run.insights_finished_at
    statements = InsightStatement.objects.filter(run=run).count()
    insights = Insight.objects.filter(project=desk).count()
    assert statements == run.insights_summary["statements"] > 0 and insights > 0

    build_insights_task.delay(str(run.pk))  # a redelivered message
    assert InsightStatement.objects.filter(run=run).count() == statements
    assert Insight.objects.filter(project=desk).count() == insights
    assert insights_sweep() == 0


def test_runs_executed_in_process_are_built_by_their_caller(desk):
    run = diagnosis_run_execute(run=diagnosis_run_start(project=desk, release="r1", enqueue=False))
    assert run.insights_status == ""  # not queued: the caller builds
    assert insights_sweep() == 0
    assert insights_build(run=run)["judged"] == 22
    running = diagnosis_run_start(project=desk, release="r1", enqueue=False)
    assert insights_build(run=running) is None  # not finished


def test_the_sweep_resends_builds_that_were_lost(desk, django_capture_on_commit_callbacks):
    run = diagnosis_run_execute(run=diagnosis_run_start(project=desk, release="r1", enqueue=False))
    DiagnosisRun.objects.filter(pk=run.pk).update(config={})  # as if a worker had run it and the message was lost
    with django_capture_on_commit_callbacks(execute=True):
        assert insights_sweep() == 1
    run.refresh_from_db()
    assert run.insights_status == "done"


def test_diagnose_inline_and_build_insights_commands(desk):
    out = StringIO()
    call_command("diagnose", "--project", desk.name, "--release", "r1", "--inline", stdout=out, stderr=StringIO())
    run = DiagnosisRun.objects.get(project=desk)
    assert run.insights_status == "done" and f"Insights of run {run.pk}" in out.getvalue()
    ids = set(Insight.objects.filter(project=desk).values_list("pk", flat=True))

    with pytest.raises(CommandError, match="--force"):
        call_command("build_insights", "--project", desk.name, "--run", str(run.pk), stdout=StringIO())
    out = StringIO()
    call_command("build_insights", "--project", desk.name, "--force", stdout=out)
    assert "0 new" in out.getvalue()
    assert set(Insight.objects.filter(project=desk).values_list("pk", flat=True)) == ids
    with pytest.raises(CommandError):
        call_command("build_insights", "--project", "no such project", stdout=StringIO())


def test_selectors_filter_and_scope(desk, outsider_project, owner):
    run = diagnose(desk, "r1")
    mediator = insight_for_tasks(desk, "mediator", TOUCHED_BY["mediator_race"], run)
    assert insight_get(project=desk, insight_id=mediator.pk) == mediator
    for bad in (mediator.pk, "x"):
        with pytest.raises(InsightNotFoundError):
            insight_get(project=outsider_project if bad == mediator.pk else desk, insight_id=bad)
    assert list(insight_list(project=outsider_project)) == []
    assert mediator in insight_list(project=desk, level="node", node="mediator", run=run, release="r1")
    assert mediator not in insight_list(project=desk, level="system")
    assert mediator not in insight_list(project=desk, release="r2")
    assert all(i.severity == mediator.severity for i in insight_list(project=desk, severity=mediator.severity))
    insight_status_set(project=desk, insight=mediator, status="acknowledged", user=owner)
    insight_confirm(project=desk, insight=mediator, user=owner, note="seen it")
    assert list(insight_list(project=desk, status="acknowledged")) == [mediator]
    assert list(insight_list(project=desk, review="confirmed")) == [mediator]
    assert [e.kind for e in mediator.events.all()] == ["created", "status", "confirmed"]

    trend = insight_trend(project=desk, insight=mediator)
    assert trend.by_release[0]["release"] == "r1" and trend.by_run[0]["traces"] == 4
    assert insight_statement_list(project=desk, insight=mediator).count() == mediator.count
    assert insight_evidence_list(project=desk, insight=mediator, run=run).count() > 0

    with pytest.raises(InsightNotFoundError):
        insight_status_set(project=outsider_project, insight=mediator, status="fixed")
    with pytest.raises(Exception, match="status must be"):
        insight_status_set(project=desk, insight=mediator, status="done")
    system = insight_list(project=desk, level="system", include_other=False).first()
    with pytest.raises(InsightMergeInvalidError):
        insight_merge(project=desk, source=mediator, target=system)
    with pytest.raises(InsightMergeInvalidError):
        insight_merge(project=desk, source=mediator, target=mediator)
    with pytest.raises(InsightSplitInvalidError):
        insight_split(project=desk, insight=mediator, statement_ids=[])
    with pytest.raises(InsightSplitInvalidError):
        insight_split(project=desk, insight=mediator, statement_ids=list(
            insight_statement_list(project=desk, insight=mediator).values_list("pk", flat=True)))
