"""The cached dashboard aggregates (frontend/dashboard_cache.py): the overview, workflow and nodes pages reuse their
aggregates while the data they came from is unchanged, recompute at once after a judge-side change (a verdict
marked wrong, a run), pick up new traces after CLEAR_DASHBOARD_CACHE_SECONDS, and never stampede."""

from __future__ import annotations

import re

import pytest
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.models import Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from diagnosis.services.insights_review import feedback_mark_wrong
from frontend.dashboard_cache import CACHE_ALIAS, aggregate_key, dashboard_aggregate
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def cache_on(settings):
    settings.CLEAR_DASHBOARD_CACHE = True
    settings.CLEAR_DASHBOARD_CACHE_SECONDS = 30
    caches[CACHE_ALIAS].clear()
    yield settings
    try:
        caches[CACHE_ALIAS].clear()
    except Exception:  # noqa: BLE001 - the test pointed it at a closed port; the next user clears it anyway
        pass


def _get(client, path: str) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200
    return response.content.decode(), [q["sql"] for q in captured.captured_queries]


def _reads_spans(queries: list[str]) -> bool:
    return any("FROM traces_span" in q or 'FROM "traces_span"' in q for q in queries)


def _content(html: str) -> str:
    html = re.sub(r"<time[^>]*>[^<]*</time>", "", html)  # the "as of" time and the CSRF tokens aside
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)


def test_pages_reuse_their_aggregates_until_the_judged_data_changes(cache_on, seeded, owner):
    client = client_for(owner)
    base = f"/p/{seeded.project.slug}"
    for page in ("workflow", "nodes"):
        first_html, first = _get(client, f"{base}/{page}/")
        assert _reads_spans(first), page
        again_html, again = _get(client, f"{base}/{page}/")
        assert not _reads_spans(again), f"{page}: the second view read the spans again"
        assert again_html.count("<tr") == first_html.count("<tr")
    _, first = _get(client, f"{base}/")
    _, again = _get(client, f"{base}/")
    assert any("TRUNC" in q.upper() for q in first) and not any("TRUNC" in q.upper() for q in again)

    # A verdict marked wrong changes the pass rates: the very next view recomputes them.
    before_html, _ = _get(client, f"{base}/nodes/")
    failing = Feedback.objects.filter(run=seeded.run, verdict=Feedback.Verdict.FAIL,
                                      target_span_id__isnull=False).exclude(target_span_id="").first()
    feedback_mark_wrong(project=seeded.project, feedback=failing, note="not a failure", user=owner)
    after_html, after = _get(client, f"{base}/nodes/")
    assert _reads_spans(after)
    cache_on.CLEAR_DASHBOARD_CACHE = False
    fresh_html, _ = _get(client, f"{base}/nodes/")
    cache_on.CLEAR_DASHBOARD_CACHE = True
    assert _content(after_html) == _content(fresh_html) != _content(before_html)

    # So does a new diagnosis run.
    _get(client, f"{base}/workflow/")
    run = diagnosis_run_start(project=seeded.project, release="r2", enqueue=False, name="again", judges=["rules"])
    diagnosis_run_execute(run=run)
    _, after = _get(client, f"{base}/workflow/")
    assert _reads_spans(after)


def test_new_traces_show_after_the_window_and_one_request_recomputes(cache_on, seeded, owner):
    client = client_for(owner)
    path = f"/p/{seeded.project.slug}/nodes/"
    _get(client, path)
    support_desk_ingest(project=seeded.project, bugs="none", release="r3", seed=2, task_ids=["order-status-shipped"])

    _, within = _get(client, path)
    assert not _reads_spans(within), "new traces recomputed the aggregate inside the window"

    cache_on.CLEAR_DASHBOARD_CACHE_SECONDS = 0
    # Someone else is recomputing (their lock is held): this view serves the entry it has.
    cache = caches[CACHE_ALIAS]
    key = aggregate_key(project=seeded.project, name="nodes", params=("", 2000))
    assert cache.get(key) is not None
    assert cache.add(f"{key}:lock", 1, 60)
    _, locked = _get(client, path)
    assert not _reads_spans(locked)
    cache.delete(f"{key}:lock")
    _, past = _get(client, path)
    assert _reads_spans(past)
    _, again = _get(client, path)
    assert not _reads_spans(again)


def test_a_filter_is_its_own_entry_and_the_cache_can_be_turned_off(cache_on, seeded, owner):
    client = client_for(owner)
    base = f"/p/{seeded.project.slug}/workflow/"
    _get(client, base)
    _, other = _get(client, base + "?release=r2")
    assert _reads_spans(other)
    _, same = _get(client, base + "?release=r2")
    assert not _reads_spans(same)

    cache_on.CLEAR_DASHBOARD_CACHE = False
    _, off = _get(client, base)
    assert _reads_spans(off)
    calls = []
    dashboard_aggregate(project=seeded.project, name="x", params=(), compute=lambda: calls.append(1))
    dashboard_aggregate(project=seeded.project, name="x", params=(), compute=lambda: calls.append(1))
    assert calls == [1, 1]


def test_pages_work_with_the_cache_unreachable(cache_on, seeded, owner):
    """Redis down (a cache on a closed port): the pages are computed, not broken."""
    cache_on.CACHES = {**cache_on.CACHES, CACHE_ALIAS: {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.5}}}
    client = client_for(owner)
    for page in ("", "workflow/", "nodes/"):
        html, queries = _get(client, f"/p/{seeded.project.slug}/{page}")
        assert "as of" in html
