"""Continuous insights (issue 27, item 1): the day's continuous run refreshes the insights, debounced, incrementally
between full re-clusterings, without closing, dropping or flapping (diagnosis/services/insights_refresh.py)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clear.webhooks.models import WebhookDelivery
from clear.webhooks.services import webhook_create
from diagnosis.models import DiagnosisRun, Insight, InsightEvent, InsightStatement
from diagnosis.services import continuous_tick
from diagnosis.services import insights_refresh as refresh_module
from diagnosis.services.insights_refresh import insights_refresh, insights_refresh_request
from diagnosis.services.insights_review import insight_status_set
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

DESK = ["compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge", "refund-damaged-item",
        "refund-status", "refund-cancelled-order", "refund-late-delivery", "two-orders-status", "return-policy",
        "password-reset"]


@pytest.fixture
def continuous(settings, desk_rubrics, monkeypatch):  # noqa: F811
    # These tests add a second batch of traces as large as the first, which a young window re-clusters at once
    # (test_a_young_window_is_reclustered_at_once_and_a_large_one_waits): keep it for the time rule alone.
    monkeypatch.setattr(refresh_module, "RECLUSTER_SHARE", float("inf"))
    settings.CLEAR_TRACE_QUIET_SECONDS = 30
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_CONTINUOUS_JUDGES = ["rules", "rubrics"]
    settings.CLEAR_INSIGHT_REFRESH_SECONDS = 120
    settings.CLEAR_INSIGHT_RECLUSTER_SECONDS = 3600
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    settings.CLEAR_TICKET_NOT_ASSOCIATED = True  # a handful of traces: every lift interval still includes 1


@pytest.fixture
def sent(monkeypatch):
    """The refresh messages sent (run ids), instead of sending them."""
    calls = []
    monkeypatch.setattr(refresh_module, "_send", calls.append)
    return calls


def _tick(capture, seconds: float) -> None:
    with capture(execute=True):
        continuous_tick(now=timezone.now() + timedelta(seconds=seconds))


def _run(project) -> DiagnosisRun:
    return DiagnosisRun.objects.get(project=project, continuous=True)


def _refresh(project, *, full: bool = False) -> dict:
    """A refresh now, as the task does it; full: as if the last full re-clustering were long ago, with work waiting."""
    run = _run(project)
    if full:
        summary = run.insights_summary or {}
        summary["refresh"] = {**summary.get("refresh", {}), "full_at": None}
        DiagnosisRun.objects.filter(pk=run.pk).update(insights_summary=summary)
    assert insights_refresh_request(run_id=run.pk, force=True)
    result = insights_refresh(run_id=run.pk)
    assert result is not None
    return result["refresh"]


def _first_refresh(project, capture, sent) -> DiagnosisRun:
    support_desk_ingest(project=project, bugs="all", task_ids=DESK, seed=0)
    _tick(capture, 31)
    run = _run(project)
    assert sent == [run.pk] and run.done_count == len(DESK)
    assert insights_refresh(run_id=run.pk)["refresh"]["kind"] == "full"  # the first refresh of a run is full
    return _run(project)


def test_two_ticks_within_the_interval_make_one_refresh(project, continuous, sent,
                                                        django_capture_on_commit_callbacks):
    run = _first_refresh(project, django_capture_on_commit_callbacks, sent)
    assert run.insights_status == "done" and run.insights_finished_at
    assert Insight.objects.filter(project=project, is_other=False).exists()
    assert Ticket.objects.filter(project=project).exists()  # tickets follow without anyone pressing a button

    support_desk_ingest(project=project, bugs="all", task_ids=DESK[:3], seed=1)
    _tick(django_capture_on_commit_callbacks, 40)  # new traces judged, but the last refresh is < 120 s old
    _tick(django_capture_on_commit_callbacks, 60)
    assert sent == [run.pk]
    _tick(django_capture_on_commit_callbacks, 200)  # due now
    _tick(django_capture_on_commit_callbacks, 201)  # queued already: nothing more
    assert sent == [run.pk, run.pk]
    assert _run(project).insights_status == "queued"
    assert insights_refresh(run_id=run.pk)["refresh"]["kind"] == "incremental"
    _tick(django_capture_on_commit_callbacks, 400)  # nothing newly judged: no refresh however long it has been
    assert len(sent) == 2


def test_a_redelivered_refresh_does_nothing_twice(project, continuous, sent, django_capture_on_commit_callbacks):
    from diagnosis.tasks import refresh_insights

    run = _first_refresh(project, django_capture_on_commit_callbacks, sent)
    statements = InsightStatement.objects.filter(run=run).count()
    assert insights_refresh_request(run_id=run.pk, force=True)
    refresh_insights(str(run.pk))
    first = _run(project).insights_summary["refresh"]
    refresh_insights(str(run.pk))  # the same message again (acks_late: a worker lost after the work)
    again = _run(project)
    assert again.insights_summary["refresh"] == first and first["count"] == 2
    assert InsightStatement.objects.filter(run=run).count() == statements
    assert insights_refresh(run_id=run.pk) is None


def _full_build_membership(run) -> dict:
    """Where the refresh's next re-clustering puts the run's statements (the full build of a continuous run)."""
    assert _refresh(run.project, full=True)["kind"] == "full"
    return {(f, p): (n, s) for f, p, n, s in InsightStatement.objects.filter(run=run).values_list(
        "feedback_id", "position", "node_insight_id", "system_insight_id")}


def test_incremental_assignment_puts_statements_where_a_full_build_does(project, continuous, sent,
                                                                      django_capture_on_commit_callbacks):
    run = _first_refresh(project, django_capture_on_commit_callbacks, sent)
    before = InsightStatement.objects.filter(run=run).values_list("feedback_id", flat=True)
    newest = max(before)
    support_desk_ingest(project=project, bugs="all", task_ids=DESK, seed=1)
    _tick(django_capture_on_commit_callbacks, 31)
    state = _refresh(project)
    assert state["kind"] == "incremental" and state["new_statements"] > 0
    incremental = {(f, p): (n, s) for f, p, n, s in InsightStatement.objects.filter(
        run=run, feedback_id__gt=newest).values_list("feedback_id", "position", "node_insight_id",
                                                     "system_insight_id")}
    assert len(incremental) == state["joined"] and state["joined"] >= state["new_statements"] * 0.5, state
    full = _full_build_membership(run)
    for key, (node, system) in incremental.items():
        assert key in full
        full_node, full_system = full[key]
        assert node is None or node == full_node, key
        assert system is None or system == full_system, key
    print(f"incremental refresh: {state['joined']} of {state['new_statements']} new statements joined an insight, "
          f"all where the full build puts them")


def test_a_refresh_never_closes_and_reopens_only_after_two(project, continuous, sent,
                                                           django_capture_on_commit_callbacks, settings):
    webhook_create(project=project, url="http://127.0.0.1:9/hook", events=["insight.created", "insight.regressed"])
    run = _first_refresh(project, django_capture_on_commit_callbacks, sent)
    ticketed = Ticket.objects.filter(project=project, insight__isnull=False, status="open").select_related("insight")
    ticket = ticketed.first()
    assert ticket is not None
    insight = ticket.insight

    # The window slides past every trace: nothing is closed, dropped or marked fixed.
    settings.CLEAR_INSIGHT_WINDOW_TRACES = 0
    assert _refresh(project, full=True)["window"] == 0
    insight.refresh_from_db()
    ticket.refresh_from_db()
    assert insight.status == "open" and ticket.status == "open"
    assert not Insight.objects.filter(project=project, status="fixed").exists()
    assert Insight.objects.filter(pk=insight.pk).exists()

    # Fixed by a person: one refresh that sees it again does not reopen it, the second in a row does.
    settings.CLEAR_INSIGHT_WINDOW_TRACES = 5000
    insight_status_set(project=project, insight=insight, status="fixed")
    ticket.refresh_from_db()
    assert ticket.status == "fixed"
    regressed = WebhookDelivery.objects.filter(event="insight.regressed")
    assert _refresh(project, full=True)["kind"] == "full"
    insight.refresh_from_db()
    ticket.refresh_from_db()
    assert insight.status == "fixed" and ticket.status == "fixed" and not regressed.exists()
    _refresh(project, full=True)
    insight.refresh_from_db()
    ticket.refresh_from_db()
    assert insight.status == "open" and insight.reopen_count == 1 and ticket.status == "open"
    assert regressed.count() == 1 and regressed.get().payload["data"]["reason"] == "reopened"


def test_a_window_slide_that_drops_a_trace_does_not_flap(project, continuous, sent,
                                                         django_capture_on_commit_callbacks, settings):
    webhook_create(project=project, url="http://127.0.0.1:9/hook", events=["insight.created", "insight.regressed"])
    run = _first_refresh(project, django_capture_on_commit_callbacks, sent)
    tickets = dict(Ticket.objects.filter(project=project).values_list("pk", "status"))
    insights = set(Insight.objects.filter(project=project).values_list("pk", flat=True))
    events = InsightEvent.objects.filter(insight__project=project, kind__in=["created", "reopened"]).count()
    deliveries = WebhookDelivery.objects.count()
    assert tickets and deliveries

    for window in (run.done_count - 1, run.done_count, run.done_count - 1, run.done_count):
        settings.CLEAR_INSIGHT_WINDOW_TRACES = window
        assert _refresh(project, full=True)["window"] == window
        assert dict(Ticket.objects.filter(project=project).values_list("pk", "status")) == tickets
        assert set(Insight.objects.filter(project=project).values_list("pk", flat=True)) == insights
        assert InsightEvent.objects.filter(insight__project=project, kind__in=["created", "reopened"]).count() \
            == events
        assert WebhookDelivery.objects.count() == deliveries


def test_refresh_now_enqueues_the_refresh(project, owner, outsider, continuous, sent,
                                          django_capture_on_commit_callbacks):
    client = client_for(owner)
    page = client.get(f"/p/{project.slug}/insights/").content.decode()
    assert 'data-testid="insights-refresh-form"' in page and "csrfmiddlewaretoken" in page
    assert "List not built yet" in page
    response = client.post(f"/p/{project.slug}/insights/refresh/", follow=True)
    assert "Nothing to refresh" in response.content.decode() and sent == []

    run = _first_refresh(project, django_capture_on_commit_callbacks, sent)
    page = client.get(f"/p/{project.slug}/insights/").content.decode()
    assert f"List last refreshed {run.insights_finished_at:%Y-%m-%d %H:%M:%S} UTC" in page
    assert client_for(outsider).post(f"/p/{project.slug}/insights/refresh/").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/p/{project.slug}/insights/refresh/", follow=True)
    assert "Refresh queued" in response.content.decode()
    assert sent == [run.pk, run.pk] and _run(project).insights_status == "queued"
    # While the next refresh waits or runs, the list is still the one the last refresh made (issue 44: the header
    # said "List not built yet" beside the rows whenever a page was read during a refresh).
    page = client.get(f"/p/{project.slug}/insights/").content.decode()
    assert f"List last refreshed {run.insights_finished_at:%Y-%m-%d %H:%M:%S} UTC" in page
    DiagnosisRun.objects.filter(pk=run.pk).update(insights_status="running")
    page = client.get(f"/p/{project.slug}/insights/").content.decode()
    assert f"List last refreshed {run.insights_finished_at:%Y-%m-%d %H:%M:%S} UTC" in page
    DiagnosisRun.objects.filter(pk=run.pk).update(insights_status="queued")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/p/{project.slug}/insights/refresh/", follow=True)
    assert "already queued or running" in response.content.decode() and len(sent) == 2
    assert client.get(f"/p/{project.slug}/insights/refresh/").status_code == 405

    # The continuous run is a rolling window with its last refresh, not a run "running" all day.
    runs = client.get(f"/p/{project.slug}/runs/").content.decode()
    assert 'data-testid="run-last-refresh"' in runs and ">running<" not in runs


def test_a_young_window_is_reclustered_at_once_and_a_large_one_waits(settings):
    from diagnosis.services.insights_refresh import _recluster_due

    settings.CLEAR_INSIGHT_RECLUSTER_SECONDS = 300
    now = timezone.now()
    recent = now - timedelta(seconds=10)
    # The day's first refresh saw one trace; four statements judged since are a new kind that should not wait.
    assert _recluster_due({"provisional": 4, "confirmed_statements": 1}, now, recent)
    # 151 new statements beside 72,000 placed ones join incrementally until the re-clustering's time comes.
    assert not _recluster_due({"provisional": 151, "confirmed_statements": 72_000}, now, recent)
    assert _recluster_due({"provisional": 151, "confirmed_statements": 72_000}, now, now - timedelta(seconds=301))
    assert not _recluster_due({"provisional": 0, "confirmed_statements": 1}, now, now - timedelta(days=1))
