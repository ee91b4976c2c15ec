"""The demo, walked in order in headless Chromium, as a new user would: log in → overview → workflow graph → an
insight (from its node in the graph) → its evidence opens the trace viewer at the quoted span → the bug list is
exported (the downloaded file is read back) → a diagnosis run is started and its progress bar followed to the end,
on a real Celery worker. Every page gets the title/landmarks/axe check and a screenshot in var/screenshots/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnosis.models import DiagnosisRun, Insight, InsightEvidence
from diagnosis.services.insights import insights_build
from diagnosis.tickets.body import md_escape
from diagnosis.tickets.models import Ticket
from frontend.templatetags.clear_ui import md_plain
from tests.frontend.conftest import seed_project
from tests.frontend.support import axe_violations, describe, login
from tests.frontend.support import Checker
from tests.support.browser import screenshot, wait_until
from tests.support.worker import use_broker

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_demo_walk(live_server, page, project, owner, settings, axe_path, celery_worker, tmp_path):
    settings.CLEAR_JUDGE_MODEL = ""
    use_broker(False)  # the seed run and its insights inline; the run started from the page goes to the worker
    try:
        seeded = seed_project(project)
        insights_build(run=seeded.run)
    finally:
        use_broker(True)
    assert DiagnosisRun.objects.get(pk=seeded.run.pk).insights_status == "done"
    check = Checker(page, axe_path)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # Log in → overview.
    page.goto(live_server.url + "/")
    assert "/login/" in page.url and page.title().endswith("· Clear")
    assert page.locator("main").count() == 1 and page.locator("label[for=id_username]").count() == 1
    violations = axe_violations(page, axe_path)  # no navigation before logging in: main is the only landmark
    assert not violations, describe(violations)
    screenshot(page, "demo-01-login")
    login(page, live_server.url)
    page.wait_for_selector("[data-testid=overview-stats]")
    assert "44" in page.inner_text("[data-testid=overview-stats]")
    assert page.locator("[data-testid=volume-chart] svg rect").count() > 0
    assert page.locator("[data-testid=top-insights] a").count() > 0
    check("demo-02-overview")

    # Workflow graph: the billing worker (a planted bug) is linked to its insights.
    page.click("nav[aria-label=Project] >> text=Workflow")
    page.wait_for_selector("[data-testid=workflow-graph]")
    node = page.locator("svg.graph a.node-link[data-node=billing_worker]")
    assert int(node.get_attribute("data-insights")) >= 1
    check("demo-03-workflow")
    node.click()
    page.wait_for_selector("[data-testid=insight-table]")
    assert "node=billing_worker" in page.url and "level=node" in page.url
    assert page.input_value("#id_node") == "billing_worker"
    check("demo-04-insights-at-node")

    # An insight.
    page.click("[data-testid=insight-table] tbody tr >> nth=0 >> [data-testid=insight-link]")
    page.wait_for_selector("[data-testid=insight-evidence]")
    insight = Insight.objects.get(project=project, pk=int(re.search(r"/insights/(\d+)/", page.url).group(1)))
    assert insight.node == "billing_worker"
    assert page.inner_text("[data-testid=insight-title]") == md_plain(insight.title)  # code spans rendered
    check("demo-05-insight")

    # Its evidence opens the trace viewer at the quoted span, the quote marked.
    link = page.locator("[data-testid=insight-evidence-link] >> nth=0")
    href = link.get_attribute("href")
    span_id = re.search(r"span=([0-9a-f]+)", href).group(1)
    trace_id = re.search(r"/traces/([0-9a-f]+)/", href).group(1)
    evidence = (InsightEvidence.objects.filter(insight=insight, span_id=span_id, trace__trace_id=trace_id)
                .order_by("pk").first())
    assert evidence is not None
    link.click()
    page.wait_for_selector(".span-row.selected")
    assert page.get_attribute(".span-row.selected", "data-span-id") == span_id
    assert f"span={span_id}" in page.url
    if evidence.quote:
        marked = " ".join(page.locator("[data-testid=span-detail] mark").all_inner_texts())
        # The viewer pretty-prints JSON, so the quote is marked piece by piece: its words are all marked.
        words = re.findall(r"[\w-]{3,}", evidence.quote)
        assert words and all(w in marked for w in words), (evidence.quote, marked)
    check("demo-06-trace-at-evidence")

    # Export the bug list: the downloaded Markdown holds the insight's ticket and its evidence.
    page.click("nav[aria-label=Project] >> text=Tickets")
    page.wait_for_selector("[data-testid=ticket-table]")
    check("demo-07-tickets")
    with page.expect_download() as download_info:
        page.click("[data-testid=export-md]")
    download = download_info.value
    assert download.suggested_filename == f"tickets-{project.slug}-open.md"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    text = Path(saved).read_text(encoding="utf-8")
    ticket = Ticket.objects.get(project=project, insight=insight)
    assert text.startswith(f"# Bug list: {md_escape(project.name)}")
    assert md_escape(insight.title) in text and f"# Ticket {ticket.pk}: {md_escape(ticket.title)}" in text
    assert f"trace {trace_id}, span {span_id}" in text
    if evidence.quote:
        assert md_escape(evidence.quote.splitlines()[0]) in text
    assert md_escape(evidence.statement_text) in text

    # Start a diagnosis run (release r2, on the worker) and follow its progress bar to the end.
    page.click("nav[aria-label=Project] >> text=Diagnosis runs")
    page.wait_for_selector("[data-testid=run-table]")
    check("demo-08-runs")
    page.click("[data-testid=start-run]")
    page.wait_for_selector("[data-testid=run-form]")
    page.select_option("#id_release", "r2")
    page.fill("#id_name", "demo walk run")
    check("demo-09-run-new")
    page.click("[data-testid=start-run-submit]")
    page.wait_for_selector("[data-testid=run-progress]")
    run = DiagnosisRun.objects.get(project=project, name="demo walk run")
    assert str(run.pk) in page.url
    wait_until(page, "document.querySelector('[data-testid=run-progress]').getAttribute('aria-valuenow') === '100'",
               timeout=120_000)
    page.wait_for_selector("[data-testid=run-status] .pill.ok", timeout=60_000)
    assert "22 judged" in re.sub(r"\s+", " ", page.inner_text("[data-testid=progress-text]"))
    run.refresh_from_db()
    assert run.status == "succeeded" and run.done_count == 22
    check("demo-10-run-finished")

    # The nodes page: pass rates and the heat map of the seed run; a cell opens that node's evidence.
    page.goto(f"{live_server.url}/p/{project.slug}/nodes/?run={seeded.run.pk}&level=node")
    page.wait_for_selector("[data-testid=heatmap-table]")
    cell = page.locator(f"[data-heat-node=billing_worker] td[data-insight='{insight.pk}'] a")
    assert re.search(r"\n\d+%\n\d+/\d+", cell.inner_text()), cell.inner_text()
    check("demo-11-nodes-heatmap")
    cell.click()
    page.wait_for_selector("[data-testid=evidence-node-filter]")
    assert page.locator("[data-testid=insight-evidence-link]").count() >= 1
    check("demo-12-insight-at-node")
    assert not errors, errors
    check.assert_clean()
