"""Issue 44: the Insights page read while a continuous refresh finishes shows its header and its rows from one moment.
A browser test (test_insight_refresh_browser.py) once saw the refresh's new insight listed under "List not built
yet": the refresh committed the insights, then marked the run refreshed in a second commit, and a page read between
the two had the rows without the time. Here the page is read at exactly that moment, after each kind of refresh."""

from __future__ import annotations

import re

import pytest

from diagnosis.models import DiagnosisRun, Insight
from diagnosis.services import insights_refresh as refresh_module
from diagnosis.services.insights_refresh import insights_refresh
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.diagnosis.test_insight_refresh import DESK, _tick, continuous, sent  # noqa: F401 - fixtures
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db


def _header_and_rows(client, project) -> tuple[str, list[str]]:
    page = client.get(f"/p/{project.slug}/insights/").content.decode()
    header = re.search(r'data-testid="insights-last-refreshed">([^<]*)<', page).group(1)
    return header, re.findall(r'<tr[^>]*data-insight="(\d+)"', page)


def test_a_page_read_right_after_a_refresh_wrote_its_insights_says_when(
        project, owner, continuous, sent, django_capture_on_commit_callbacks, monkeypatch):  # noqa: F811
    client = client_for(owner)
    seen: list[tuple[str, list[str]]] = []
    full = refresh_module._full

    def then_read(**kwargs):
        full(**kwargs)  # its transaction has committed the refresh's insights; the task has not finished
        seen.append(_header_and_rows(client, project))

    monkeypatch.setattr(refresh_module, "_full", then_read)
    support_desk_ingest(project=project, bugs="all", task_ids=DESK, seed=0)
    _tick(django_capture_on_commit_callbacks, 31)
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    assert _header_and_rows(client, project) == (
        "List not built yet · newly judged traces refresh it at most every 120 s.", [])
    assert insights_refresh(run_id=run.pk)["refresh"]["kind"] == "full"  # a run's first refresh

    [(header, rows)] = seen
    assert rows and Insight.objects.filter(project=project, pk__in=rows).count() == len(rows)
    assert header.startswith("List last refreshed "), (header, rows)
