"""The review of issue 39: "List last refreshed" is the time of the last build or refresh that changed the list, never
that of a refresh that failed and is about to be retried (the run is queued again, its insights_finished_at is the
failure's)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.models import DiagnosisRun
from diagnosis.selectors import insights_last_refreshed

pytestmark = pytest.mark.django_db


def test_a_failed_refresh_is_not_the_last_refresh(project):
    refreshed = timezone.now() - timedelta(minutes=5)
    failed = refreshed + timedelta(minutes=3)
    run = DiagnosisRun.objects.create(project=project, status="running", continuous=True, insights_status="done",
                                      insights_finished_at=refreshed,
                                      insights_summary={"refresh": {"at": refreshed.isoformat(), "count": 4}})
    assert insights_last_refreshed(project=project) == refreshed

    # the next refresh failed, and the beat queued another one
    DiagnosisRun.objects.filter(pk=run.pk).update(insights_status="queued", insights_finished_at=failed,
                                                  insights_error="OperationalError: server closed the connection")
    assert insights_last_refreshed(project=project) == refreshed

    # an older full run's build does not win over the continuous run's last good refresh
    DiagnosisRun.objects.create(project=project, status="succeeded", insights_status="done",
                                insights_finished_at=refreshed - timedelta(hours=1))
    assert insights_last_refreshed(project=project) == refreshed

    # a later successful refresh clears the error and is the time shown
    done = failed + timedelta(minutes=1)
    DiagnosisRun.objects.filter(pk=run.pk).update(insights_status="done", insights_finished_at=done, insights_error="")
    assert insights_last_refreshed(project=project) == done


def test_a_continuous_run_that_never_refreshed_successfully_is_not_built(project):
    DiagnosisRun.objects.create(project=project, status="running", continuous=True, insights_status="queued",
                                insights_finished_at=timezone.now(), insights_error="RuntimeError: boom",
                                insights_summary={})
    assert insights_last_refreshed(project=project) is None


def test_a_finished_run_that_held_no_traces_is_not_the_latest_run(project):
    from diagnosis.selectors import diagnosis_run_latest

    judged = DiagnosisRun.objects.create(project=project, status="succeeded", total_count=3, done_count=3)
    empty = DiagnosisRun.objects.create(project=project, status="succeeded", total_count=0, purpose="gate")
    assert empty.created_at >= judged.created_at
    assert diagnosis_run_latest(project=project) == judged
    starting = DiagnosisRun.objects.create(project=project, status="queued", total_count=0)
    assert diagnosis_run_latest(project=project) == starting  # not fanned out yet: it may hold traces
