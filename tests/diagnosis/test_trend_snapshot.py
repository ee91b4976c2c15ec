"""Issue 44: an insight's trend by release is written with the insight, from the runs as they stand when it is written.
A fresh-clone CI run (48dfeea, the demo's worker taking tasks ten times as fast) once showed the demo's misroute
with no v1 row in its trend. Two ways that could happen, each reproduced here:

* a continuous refresh's re-clustering committed a new insight row and wrote its trend in a later statement, so a page
  read between them had no trend at all ("No release figures yet");
* a trend refresh read the project's runs, then another run's build committed its figures and its trend, and the
  first refresh wrote its older view over it: a release the other run judged lost its row.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from diagnosis.insights import trend as trend_module
from diagnosis.insights.trend import trend_refresh
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from diagnosis.services import insights_refresh as refresh_module
from diagnosis.services.insights import insights_build
from diagnosis.services.insights_refresh import insights_refresh
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.diagnosis.test_insight_refresh import DESK, _run, _tick, continuous, sent  # noqa: F401 - fixtures

# Long enough for the other run's build to finish when nothing stops it (a few tenths of a second here); on
# Postgres the wait ends as soon as that build waits for a lock (pg_locks), so only SQLite waits it out.
BUILD_S = 4.0


def _live_trends(project) -> dict[int, list]:
    return dict(Insight.objects.filter(project=project, merged_into__isnull=True, is_other=False)
                .values_list("pk", "trend"))


@pytest.mark.django_db
def test_a_refresh_commits_its_new_insights_with_their_trend(
        project, continuous, sent, django_capture_on_commit_callbacks, monkeypatch):  # noqa: F811
    seen: list[dict[int, list]] = []
    full = refresh_module._full

    def then_read(**kwargs):
        full(**kwargs)  # its transaction has committed the refresh's insights; the task has not finished
        seen.append(_live_trends(project))

    monkeypatch.setattr(refresh_module, "_full", then_read)
    support_desk_ingest(project=project, bugs="all", task_ids=DESK, seed=0)
    _tick(django_capture_on_commit_callbacks, 31)
    assert insights_refresh(run_id=_run(project).pk)["refresh"]["kind"] == "full"

    [trends] = seen
    assert trends
    for insight_id, trend in trends.items():
        assert [row["release"] for row in trend] == ["r1"], (insight_id, trend)
        assert trend[0]["judged"] == len(DESK) and trend[0]["count"] >= 1, (insight_id, trend)


def _waiting_on_a_lock(pid: int | None) -> bool:
    if connection.vendor != "postgresql" or pid is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)  # two connections, each committing on its own
def test_a_trend_refresh_never_writes_over_a_newer_runs_figures(project, settings, monkeypatch):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", task_ids=DESK[:4], release="r1", seed=0)
    first = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="r1", enqueue=False))
    insights_build(run=first)
    support_desk_ingest(project=project, bugs="all", task_ids=DESK[:4], release="r2", seed=1)
    second = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="r2", enqueue=False))
    assert second.status == "succeeded" and DiagnosisRun.objects.get(pk=second.pk).insights_status != "done"

    other: dict = {}

    def build_second() -> None:
        try:
            other["pid"] = connection.cursor().connection.info.backend_pid \
                if connection.vendor == "postgresql" else None
            other["summary"] = insights_build(run=DiagnosisRun.objects.get(pk=second.pk))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            other["error"] = exc
        finally:
            connection.close()

    read = trend_module._latest_by_release
    worker = threading.Thread(target=build_second, daemon=True)

    def read_then_let_the_second_run_build(**kwargs):
        runs = read(**kwargs)  # the first run only: the second has no insights yet
        if threading.current_thread() is worker:
            return runs  # the second run's own trend refresh
        worker.start()
        deadline = time.monotonic() + BUILD_S
        while worker.is_alive() and time.monotonic() < deadline and not _waiting_on_a_lock(other.get("pid")):
            time.sleep(0.05)
        return runs

    monkeypatch.setattr(trend_module, "_latest_by_release", read_then_let_the_second_run_build)
    trend_refresh(project_id=project.pk)  # e.g. a review's, or another run's refresh
    worker.join(timeout=60)
    assert not worker.is_alive() and "error" not in other, other
    assert other["summary"] is not None

    trends = _live_trends(project)
    assert trends
    second_found = {i for i, trend in trends.items() if any(r["release"] == "r2" and r["count"] for r in trend)}
    assert second_found, trends
    for insight_id, trend in trends.items():
        assert [row["release"] for row in trend] == ["r1", "r2"], (insight_id, trend)
