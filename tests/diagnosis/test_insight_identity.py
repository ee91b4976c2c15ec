"""Identity that holds (issue 39, item 2; diagnosis/insights/held.py): a refresh or re-clustering never makes an
insight of statements open, titled insights held already, and never leaves two open insights with one level, node
and title; on unchanged data any number of refreshes changes nothing."""

from collections import Counter
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from diagnosis.models import DiagnosisRun, Insight, InsightEvent
from diagnosis.services import continuous_tick
from diagnosis.services import insights_refresh as refresh_module
from diagnosis.services.insights_refresh import insights_refresh, insights_refresh_request
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(project, settings, desk_rubrics, monkeypatch, django_capture_on_commit_callbacks):  # noqa: F811
    """The demo: v1 with every bug, v2 without the misroute, a full run; then the day's continuous run claims and
    judges the same traces (its judges differ: no contrastive judge), not yet refreshed."""
    monkeypatch.setattr(refresh_module, "RECLUSTER_SHARE", float("inf"))
    monkeypatch.setattr(refresh_module, "_send", lambda run_id: None)
    settings.CLEAR_TRACE_QUIET_SECONDS = 30
    settings.CLEAR_INSIGHT_RECLUSTER_SECONDS = 3600
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    diagnose(project, "")
    with django_capture_on_commit_callbacks(execute=True):
        continuous_tick(now=timezone.now() + timedelta(seconds=31))
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert run.done_count == 44
    return run


def _refresh(run, *, full: bool) -> dict:
    if full:
        current = DiagnosisRun.objects.get(pk=run.pk)
        summary = current.insights_summary or {}
        summary["refresh"] = {**summary.get("refresh", {}), "full_at": None}
        DiagnosisRun.objects.filter(pk=run.pk).update(insights_summary=summary)
    insights_refresh_request(run_id=run.pk, force=True)  # the beat queued the run's first one already
    result = insights_refresh(run_id=run.pk)
    assert result is not None
    return result["refresh"]


def _listed(project) -> list[tuple]:
    return list(Insight.objects.filter(project=project, is_other=False, merged_into__isnull=True)
                .order_by("pk").values_list("pk", "level", "node", "title", "severity", "status"))


def _assert_distinct(project) -> None:
    open_titles = Counter(Insight.objects.filter(project=project, is_other=False, merged_into__isnull=True,
                                                 status__in=["open", "acknowledged"])
                          .values_list("level", "node", "title"))
    assert all(n == 1 for n in open_titles.values()), open_titles


def test_the_continuous_runs_first_refresh_over_the_full_runs_traces_creates_nothing(project, demo):
    """The demo's fourth row: the continuous run's planner statements (no contrastive finding among them) clustered
    apart from the contrastive insight that held them, below the identity threshold, and became a new insight."""
    before = _listed(project)
    assert _refresh(demo, full=False)["kind"] == "full"
    assert _listed(project) == before
    assert not InsightEvent.objects.filter(run=demo, kind="created").exists()
    _assert_distinct(project)


def test_refreshes_on_unchanged_data_change_nothing(project, demo):
    before = _listed(project)
    for full in (False, True, False, True, True):
        _refresh(demo, full=full)
        assert _listed(project) == before
    assert not InsightEvent.objects.filter(insight__project=project, kind="created", run=demo).exists()


def test_two_open_insights_of_one_title_become_one(project, demo):
    """A database from before the rule (or a rename) holding a duplicate: the next refresh merges the newer into the
    older, so ids stay and one row is left."""
    original = Insight.objects.filter(project=project, is_other=False, level="system").order_by("pk").first()
    duplicate = Insight.objects.create(project=project, level=original.level, node=original.node,
                                       title=original.title, severity="medium", first_seen=original.first_seen)
    _refresh(demo, full=False)
    duplicate.refresh_from_db()
    assert duplicate.merged_into_id == original.pk
    assert Insight.objects.get(pk=original.pk).merged_into_id is None
    _assert_distinct(project)


STEPS = st.lists(st.one_of(st.just(("refresh", 0)), st.just(("recluster", 0)),
                           st.tuples(st.just("slide"), st.integers(min_value=1, max_value=44))), max_size=4)


@hsettings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
           derandomize=True)
@given(steps=STEPS)
def test_refreshes_slides_and_reclusterings_over_fixed_statements_create_nothing(project, demo, settings, steps):
    settings.CLEAR_INSIGHT_WINDOW_TRACES = 5000
    ids = set(Insight.objects.filter(project=project).values_list("pk", flat=True))
    with transaction.atomic():  # each example starts from the same statements
        _refresh(demo, full=False)  # the run's first refresh is a re-clustering
        for kind, size in steps:
            if kind == "slide":
                settings.CLEAR_INSIGHT_WINDOW_TRACES = size
            _refresh(demo, full=kind != "refresh")
            made = set(Insight.objects.filter(project=project, is_other=False).values_list("pk", flat=True)) - ids
            assert not made, (steps, Insight.objects.filter(pk__in=made).values_list("level", "node", "title"))
            _assert_distinct(project)
        transaction.set_rollback(True)
