"""Which run gives an insight its headline figures (diagnosis/insights/headline.py): the latest full run of the
newest release; gate, filtered, sampled, stopped and continuous runs only when nothing better has the insight."""

from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.insights.headline import HeadlineRanker, diagnosis_run_headline, release_newest
from diagnosis.models import DiagnosisRun
from traces.models import Trace

pytestmark = pytest.mark.django_db

Status, Purpose = DiagnosisRun.Status, DiagnosisRun.Purpose


def _run(project, *, minutes: int, insights: str = "done", **fields) -> DiagnosisRun:
    run = DiagnosisRun.objects.create(project=project, status=fields.pop("status", Status.SUCCEEDED),
                                      insights_status=insights, **fields)
    DiagnosisRun.objects.filter(pk=run.pk).update(created_at=timezone.now() + timedelta(minutes=minutes))
    run.refresh_from_db()
    return run


def test_full_means_a_whole_release_or_everything_judged_to_the_end(project):
    assert DiagnosisRun(project=project, release="v2", status=Status.SUCCEEDED).is_full
    assert DiagnosisRun(project=project, status=Status.SUCCEEDED).is_full
    for partial in (dict(purpose=Purpose.GATE), dict(continuous=True), dict(sample_rate=0.5), dict(node="planner"),
                    dict(outcome="failure"), dict(tags=["ci"]), dict(trace_ids=["ab"]), dict(since=timezone.now()),
                    dict(status=Status.BUDGET_EXHAUSTED), dict(status=Status.CANCELLED), dict(status=Status.RUNNING)):
        run = DiagnosisRun(project=project, release="v2", **{"status": Status.SUCCEEDED, **partial})
        assert not run.is_full, partial
    labels = {DiagnosisRun(project=project, release="v2", status=Status.SUCCEEDED).scope_label,
              DiagnosisRun(project=project, purpose=Purpose.GATE, release="v1").scope_label,
              DiagnosisRun(project=project, status=Status.BUDGET_EXHAUSTED).scope_label}
    assert labels == {"release v2, full", "release v1, CI gate", "all releases, stopped early"}


def test_the_runs_filter_of_writing_insights_is_the_property(project):
    """headline.py and trend.py filter the runs in the database with writes_insights_q: it picks exactly the runs whose
    writes_insights is true, whatever scope and state they have."""
    scopes = (dict(), dict(release="v2"), dict(purpose=Purpose.GATE), dict(continuous=True, continuous_key="d"),
              dict(continuous=True, continuous_key="e", node="planner"), dict(sample_rate=0.5), dict(node="planner"),
              dict(outcome="failure"), dict(tags=["ci"]), dict(trace_ids=["ab"]), dict(since=timezone.now()),
              dict(until=timezone.now()), dict(status=Status.BUDGET_EXHAUSTED), dict(status=Status.CANCELLED))
    runs = [_run(project, minutes=n, **scope) for n, scope in enumerate(scopes)]
    writing = {run.pk for run in runs if run.writes_insights}
    assert len(writing) == 6  # everything, v2, continuous (twice: its scope is the day), stopped early (twice)
    assert set(DiagnosisRun.objects.filter(DiagnosisRun.writes_insights_q()).values_list("pk", flat=True)) == writing


def test_the_newest_release_is_the_one_first_received_last(project):
    assert release_newest(project_id=project.pk) == ""
    for index, release in enumerate(["v1", "v2", "", "v1"]):
        Trace.objects.create(project=project, trace_id=f"{index:032x}", release=release)
    first = timezone.now()
    Trace.objects.filter(release="v1").update(first_received_at=first)
    Trace.objects.filter(release="v2").update(first_received_at=first + timedelta(seconds=1))
    Trace.objects.filter(trace_id=f"{3:032x}").update(first_received_at=first + timedelta(hours=1))
    # v1 still receives traces, but v2 arrived after it; a trace without a release names none.
    assert release_newest(project_id=project.pk) == "v2"


def test_runs_rank_full_first_then_the_newest_release_then_time(project):
    ranker = HeadlineRanker(newest="v2")
    full_v2 = _run(project, minutes=0, release="v2")
    everything = _run(project, minutes=1, insights_summary={"judged_by_release": {"v1": 3, "v2": 3}})
    everything_old = _run(project, minutes=2, insights_summary={"judged_by_release": {"v1": 3}})
    full_v1 = _run(project, minutes=3, release="v1")
    gate_v2 = _run(project, minutes=4, release="v2", purpose=Purpose.GATE)
    gate_v1 = _run(project, minutes=5, release="v1", purpose=Purpose.GATE)
    ordered = sorted([full_v2, everything, everything_old, full_v1, gate_v2, gate_v1], key=ranker.rank,
                     reverse=True)
    assert ordered == [everything, full_v2, full_v1, everything_old, gate_v2, gate_v1]
    # A run being built tells which releases it judged.
    assert ranker.covers_newest(everything_old, judged_releases={"v2"})


def test_the_dashboard_figures_run_is_never_a_gate_run_while_a_full_one_has_insights(project):
    Trace.objects.create(project=project, trace_id="a" * 32, release="v1")
    Trace.objects.create(project=project, trace_id="b" * 32, release="v2")
    Trace.objects.filter(release="v2").update(first_received_at=timezone.now() + timedelta(seconds=1))
    assert diagnosis_run_headline(project=project) is None
    _run(project, minutes=0, release="v2", purpose=Purpose.GATE)
    _run(project, minutes=1, release="v1", purpose=Purpose.GATE)
    assert diagnosis_run_headline(project=project) is None  # a gate's runs write no figures (issue 27)
    full = _run(project, minutes=2, insights_summary={"judged_by_release": {"v1": 1, "v2": 1}})
    _run(project, minutes=3, release="v2", purpose=Purpose.GATE)
    _run(project, minutes=4, release="v2", insights="running")  # not built yet
    _run(project, minutes=5, continuous=True, continuous_key="today", status=Status.RUNNING, insights="")
    assert diagnosis_run_headline(project=project) == full
