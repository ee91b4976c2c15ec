"""A continuous run grows all day and stays open until the next day's first beat: the pages call it "continuous",
never "running" with a progress bar stuck at 100% (issue 17, item 6)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.models import DiagnosisRun
from diagnosis.services import continuous_tick
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def continuous_run(project, settings) -> DiagnosisRun:
    settings.CLEAR_TRACE_QUIET_SECONDS = 30
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_CONTINUOUS_JUDGES = ["rules"]
    support_desk_ingest(project=project, bugs="all", task_ids=["compare-two-invoices", "refund-status"])
    assert continuous_tick(now=timezone.now() + timedelta(seconds=31)) == 2
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert (run.status, run.done_count, run.total_count) == ("running", 2, 2)  # caught up: 100% of what it has
    return run


def _row(html: str, run: DiagnosisRun) -> str:
    start = html.index(f'data-run-id="{run.pk}"')
    return html[start:html.index("</tr>", start)]


def test_a_continuous_run_is_shown_as_continuous_not_running(project, owner, continuous_run):
    client = client_for(owner)
    row = _row(client.get(f"/p/{project.slug}/runs/").content.decode(), continuous_run)
    assert 'data-testid="run-continuous"' in row and ">continuous<" in row
    assert ">running<" not in row and 'data-testid="run-progress"' not in row and "100%" not in row
    assert "2 judged" in row

    page = client.get(f"/p/{project.slug}/runs/{continuous_run.pk}/").content.decode()
    assert 'data-testid="run-continuous"' in page and ">running<" not in page
    assert 'data-testid="run-progress"' not in page and "data-poll" not in page
    assert "Continuous: completed traces are judged as they arrive" in page
    assert "all releases, continuous" in page
    status = client.get(f"/p/{project.slug}/runs/{continuous_run.pk}/status.json").json()
    assert status["continuous"] is True and status["status_label"] == "Continuous"

    # The overview names it the same way (no run has insights yet, so it is the latest run shown).
    overview = client.get(f"/p/{project.slug}/").content.decode()
    start = overview.index('data-testid="latest-run"')
    card = overview[start:overview.index("</section>", start)]
    assert 'data-testid="run-continuous"' in card and ">running<" not in card


def test_a_closed_continuous_run_is_finished_and_still_labelled(project, owner, continuous_run, settings):
    # Switched off, the beat still closes past days' runs.
    settings.CLEAR_CONTINUOUS_DIAGNOSIS = False
    assert continuous_tick(now=timezone.now() + timedelta(days=1)) == 0
    continuous_run.refresh_from_db()
    assert continuous_run.status == "succeeded"
    row = _row(client_for(owner).get(f"/p/{project.slug}/runs/").content.decode(), continuous_run)
    assert ">succeeded<" in row and ">continuous<" in row
