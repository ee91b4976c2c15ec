"""Issue 27, item 2, in the browser: `clearctl gate --release v2 --baseline-release v1` leaves the Insights list, the
overview and every insight's figures exactly as a person saw them before it ran.

The support desk: v1 with the misroute and the mediator race, v2 with the misroute and the retry loop, so that the
gate's run of v2 has patterns of its own besides those v1's full run stored (before issue 27 such a run added a row to
the Insights list and v2 rows, citations and dates to the insights' pages). A full run of v1 (POST /api/v1/runs/,
Celery eager: judged and its insights built within the request) builds the list. Headless Chromium reads the
Insights list (every row, every page), the overview and every listed insight's page; the real `clearctl gate` runs
against the live server (it reuses v1's run and starts a gate run of v2, whose insights are built as
test_clearctl_gate.py gets them built); the same pages are read again and must be identical. Only what legitimately
moves when a run is added is left out (each is said where it is done). Screenshots:
var/screenshots/gate_insights_{before,after}.png and gate_overview_{before,after}.png."""

from __future__ import annotations

import difflib
import pprint

import pytest

from clear.cli import main
from diagnosis.models import DiagnosisRun, Insight
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.support import login
from tests.support.browser import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The text of `root` (a selector) without the elements the selectors in `drop` match; innerText of a detached clone
# would lose the layout's line breaks, so the elements are hidden in place, read, and shown again.
_TEXT_WITHOUT = """([root, drop]) => {
  const el = document.querySelector(root);
  if (!el) return null;
  const hidden = [];
  for (const sel of drop) for (const e of el.querySelectorAll(sel)) { hidden.push([e, e.style.display]);
                                                                    e.style.display = "none"; }
  const text = el.innerText;
  for (const [e, display] of hidden) e.style.display = display;
  return text;
}"""
_HREFS = "(root) => root ? [...root.querySelectorAll('a[href]')].map(a => a.getAttribute('href')) : []"


def _goto(page, url: str, ready: str) -> None:
    page.goto(url)
    page.wait_for_selector(ready)


def _insights_list(page, base: str, slug: str, shot: str) -> dict:
    """Every row of the Insights list, page after page: its insight, its visible text and its link, in order; and
    the "last refreshed" line (runs that write no insight must not move it either)."""
    _goto(page, f"{base}/p/{slug}/insights/", "[data-testid=insight-table]")
    screenshot(page, shot)
    rows, pages = [], 0
    while True:
        pages += 1
        for row in page.locator("[data-testid=insight-table] tbody tr").all():
            rows.append({"insight": row.get_attribute("data-insight"), "text": row.inner_text(),
                         "href": row.locator("[data-testid=insight-link]").get_attribute("href")})
        following = page.locator("[data-testid=next-page]")
        if not following.count():
            break
        following.click()
        page.wait_for_selector("[data-testid=insight-table]")
    refreshed = page.locator("[data-testid=insights-last-refreshed]")
    return {"rows": rows, "pages": pages,
            "last_refreshed": refreshed.inner_text() if refreshed.count() else None}


def _overview(page, base: str, slug: str, shot: str) -> dict:
    _goto(page, f"{base}/p/{slug}/", "[data-testid=top-insights]")
    screenshot(page, shot)
    top = page.locator("[data-testid=top-insights]")
    cards = page.locator("[data-testid=overview-stats] > .card")
    return {
        "top_insights": top.inner_text(),
        "top_links": top.evaluate(_HREFS),
        # The judge-cost card counts the project's runs and their spend: the gate's run is one more run, so it
        # legitimately changes (it is no insight figure). The other cards are the traces' figures.
        "stats": [card.inner_text() for card in cards.all() if card.get_attribute("data-testid") != "judge-cost"],
        # Which run the insight figures come from, its scope, status, progress and cost. Left out: the failing-traces
        # count beside it, which is project-wide (each judge's latest verdict on each trace) and legitimately grows
        # when the gate's run judges v2's traces for the first time; verdicts are not insights.
        "figures_run": page.evaluate(_TEXT_WITHOUT, ["[data-testid=figures-run]",
                                                      ["[data-testid=failing-traces]"]]),
        "figures_run_links": page.locator("[data-testid=figures-run]").evaluate(_HREFS),
        # Not compared: the header's "figures as of HH:MM:SS" (when the cached trace aggregates were computed, a
        # clock) and the "Latest run: …" line, which names the newest run, the gate's, once it exists (checked below).
    }


def _insight_pages(page, base: str, listed: dict) -> dict:
    """Each listed insight's page as shown: title, level and node, figures from which run, severity, status and
    review, statements and traces, frequency and its interval, lift, when found, affected nodes, ticket, what
    happens, trend by release, linked insights, evidence; and every link on it."""
    pages = {}
    for row in listed["rows"]:
        _goto(page, base + row["href"], "[data-testid=insight-summary]")
        main_ = page.locator("main")
        pages[row["insight"]] = {"text": main_.inner_text(), "links": main_.evaluate(_HREFS)}
    return pages


def _read(page, base: str, slug: str, when: str) -> dict:
    listed = _insights_list(page, base, slug, f"gate_insights_{when}")
    overview = _overview(page, base, slug, f"gate_overview_{when}")
    return {"list": listed, "overview": overview, "insights": _insight_pages(page, base, listed)}


def _differences(before: dict, after: dict) -> str:
    lines = []
    for part in ("list", "overview", "insights"):
        if before[part] != after[part]:
            lines += [f"--- {part} changed:"] + list(difflib.unified_diff(
                pprint.pformat(before[part], width=150).splitlines(),
                pprint.pformat(after[part], width=150).splitlines(), "before", "after", lineterm="", n=1))
    return "\n".join(lines)


def test_gate_leaves_the_insights_list_the_overview_and_every_insights_figures(
        live_server, page, issued_key, monkeypatch, settings, project, owner, desk_rubrics, capsys):  # noqa: F811
    from rest_framework.test import APIClient

    settings.CLEAR_JUDGE_MODEL = ""
    monkeypatch.setenv("CLEAR_URL", live_server.url)
    monkeypatch.setenv("CLEAR_API_KEY", issued_key.secret)
    support_desk_ingest(project=project, bugs="misroute,mediator_race", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="misroute,retry_loop", release="v2", seed=1)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    response = api.post("/api/v1/runs/", {"release": "v1", "name": "nightly v1"}, format="json")
    assert response.status_code in (200, 201, 202), response.content
    full = DiagnosisRun.objects.get(pk=response.json()["id"])
    assert (full.status, full.insights_status) == ("succeeded", "done")
    assert Insight.objects.filter(project=project).count() >= 3

    base, slug = live_server.url, project.slug
    login(page, base)
    before = _read(page, base, slug, "before")
    from diagnosis.selectors import insight_list

    # one row per problem (issue 39): the node insights a system insight holds are nested in its row
    assert len(before["list"]["rows"]) == insight_list(project=project, nested=True).count() >= 3
    assert "nightly v1" in before["overview"]["figures_run"] and before["overview"]["top_links"]
    assert all(p["text"] and "Figures from" in p["text"] for p in before["insights"].values())

    # The real gate, in this process, against the live server (runs and insights finish within its requests).
    code = main(["gate", "--release", "v2", "--baseline-release", "v1", "--max-new", "99", "--max-worse", "99",
                 "--interval", "0.05"])
    out = capsys.readouterr()
    assert code == 0, out
    assert "PASSED" in out.out and "resolved" in out.out, out.out
    assert "reusing" in out.err, out.err  # v1's full run is the baseline: no second run of v1
    assert DiagnosisRun.objects.filter(project=project, release="v1").count() == 1
    gate = DiagnosisRun.objects.get(project=project, release="v2")
    assert (gate.purpose, gate.status, gate.insights_status) == ("gate", "succeeded", "done")
    assert gate.done_count == gate.total_count > 0
    # It saw v1's mediator race gone in v2 (the comparison reads the gate's run by identity).
    compared = api.get(f"/api/v1/compare/?base_release=v1&head_run={gate.pk}").json()
    assert compared["counts"]["resolved"] >= 1, compared["counts"]

    after = _read(page, base, slug, "after")
    assert after == before, _differences(before, after)
    # The pages were read afresh: the overview now names the gate's run as the latest one.
    page.goto(f"{base}/p/{slug}/")
    latest = page.locator("[data-testid=latest-other-run]")
    assert latest.count() and "clearctl gate v2" in latest.inner_text(), "the overview does not show the gate's run"
