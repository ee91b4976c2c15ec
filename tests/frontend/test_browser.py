"""The pages in a real headless Chromium: a walk through every page (screenshots in var/screenshots/), axe-core
on each, and hostile trace content that must never run."""

from __future__ import annotations

import re

import pytest

from tests.frontend.conftest import EVIL_TRACE_ID, evil_otlp_body, seed_project
from tests.frontend.support import Checker, login
from tests.support.browser import screenshot, wait_until
from traces.models import Trace

pytestmark = [pytest.mark.browser, pytest.mark.every_database, pytest.mark.django_db(transaction=True)]


def test_walk_through_every_page(live_server, page, project, owner, settings, axe_path):
    settings.CLEAR_JUDGE_MODEL = ""
    seeded = seed_project(project)
    check = Checker(page, axe_path)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server.url)
    page.wait_for_selector("[data-testid=overview-stats]")
    assert "44" in page.inner_text("[data-testid=overview-stats]")
    assert page.locator("[data-testid=volume-chart] svg rect").count() > 0
    assert "judge cost" in page.inner_text("[data-testid=judge-cost]")
    check("ui-overview")

    page.click("nav[aria-label=Project] >> text=Workflow")
    page.wait_for_selector("[data-testid=workflow-graph]")
    names = page.eval_on_selector_all("svg.graph [data-node]", "els => els.map(e => e.getAttribute('data-node'))")
    assert {"support_desk", "planner", "mediator", "writer", "billing_worker"} <= set(names)
    check("ui-workflow")

    page.click("nav[aria-label=Project] >> text=Nodes")
    page.wait_for_selector("[data-testid=node-table]")
    check("ui-nodes")

    page.click("nav[aria-label=Project] >> text=Traces")
    page.wait_for_selector("[data-testid=trace-table]")
    check("ui-traces")
    page.select_option("#id_release", "r1")
    page.select_option("#id_outcome", "failure")
    page.fill("#id_q", "compare-two-invoices")
    page.click("[data-testid=trace-filters] button[type=submit]")
    page.wait_for_selector("[data-testid=trace-table]")
    assert "release=r1" in page.url and "outcome=failure" in page.url
    assert page.locator("[data-testid=trace-table] tbody tr").count() == 1
    check("ui-traces-filtered")

    page.click("[data-testid=trace-table] tbody tr a")
    page.wait_for_selector("[data-testid=span-tree]")
    assert page.locator(".span-row").count() == 16
    assert page.locator(".wf-bar").count() == 16
    assert "rule.repeated_tool_call" in page.inner_text("[data-testid=trace-feedback]")
    check("ui-trace")
    # A verdict opens the span it blames, with its evidence; an evidence link opens the cited span, highlighted,
    # with the quote marked in its content.
    page.click("[data-judge='rule.repeated_tool_call'] [data-testid=verdict-link]")
    page.wait_for_selector("[data-testid=span-detail] [data-judge='rule.repeated_tool_call']")
    # the repeated call is blamed on the model turn of billing_worker that issued it (issue 41), not on the tool
    assert page.inner_text(".span-row.selected").startswith("LLM")
    assert "billing_worker" in page.inner_text("[data-testid=span-detail]")
    # its evidence: the step (where it names the tool), then the call's arguments and the tool's reply
    page.click("[data-testid=span-detail] [data-testid=evidence-link] >> nth=1")
    page.wait_for_selector(".span-row.selected")
    selected = page.get_attribute(".span-row.selected", "data-span-id")
    assert f"span={selected}" in page.url
    assert "INV-9011" in page.inner_text("[data-testid=span-input] mark")
    assert page.evaluate("document.querySelector('.span-row.selected').getBoundingClientRect().top") < 860
    check("ui-trace-evidence")
    # Mark the retry-loop verdict wrong from the span it blames.
    page.go_back()
    page.wait_for_selector("[data-testid=span-detail] [data-judge='rule.repeated_tool_call']")
    card = page.locator("[data-testid=span-detail] [data-judge='rule.repeated_tool_call']")
    card.locator("summary", has_text="Verdict wrong?").click()
    card.locator("textarea").fill("retrying a rate-limited call is what we want")
    card.locator("button[type=submit]").click()
    page.wait_for_selector("[data-testid=span-detail] [data-testid=corrected]")
    assert "retrying a rate-limited call is what we want" in page.inner_text("[data-testid=span-detail]")
    assert "marked wrong" in page.inner_text("[data-testid=failing-list]")
    check("ui-trace-marked-wrong")

    page.click("nav[aria-label=Project] >> text=Diagnosis runs")
    page.wait_for_selector("[data-testid=run-table]")
    check("ui-runs")
    page.click("[data-testid=start-run]")
    page.wait_for_selector("[data-testid=run-form]")
    check("ui-run-new")
    page.select_option("#id_release", "r2")
    page.fill("#id_name", "browser run")
    page.fill("#id_budget_cost", "1")
    page.click("[data-testid=start-run-submit]")
    # Eager Celery under the live server: the run executes while the form is posted; the bar polls to 100%.
    page.wait_for_selector("[data-testid=run-progress]")
    wait_until(page, "document.querySelector('[data-testid=run-progress]').getAttribute('aria-valuenow') === '100'",
               timeout=30_000)
    page.wait_for_selector("[data-testid=run-status] .pill.ok")
    assert "22 judged" in re.sub(r"\s+", " ", page.inner_text("[data-testid=progress-text]"))
    check("ui-run")

    page.click("nav[aria-label=Project] >> text=Settings")
    page.wait_for_selector("text=API keys")
    check("ui-api-keys")
    page.click("nav[aria-label=Settings] >> text=Rubrics")
    page.wait_for_selector("[data-testid=rubric-table]")
    check("ui-rubrics")
    page.click("nav[aria-label=Settings] >> text=Judge model")
    page.wait_for_selector("[data-testid=judge-config]")
    check("ui-judge-model")
    page.click("nav[aria-label=Settings] >> text=Issue tracker")
    page.wait_for_selector("[data-testid=tracker-form]")
    check("ui-issue-tracker")
    assert not errors, errors
    assert seeded.run.status == "succeeded"
    check.assert_clean()


def test_empty_project_pages_say_what_to_do(live_server, page, project, owner, axe_path):
    check = Checker(page, axe_path)
    login(page, live_server.url)
    page.wait_for_selector("[data-testid=next-steps]")
    check("ui-empty-overview")
    for path, name in (("traces/", "ui-empty-traces"), ("workflow/", "ui-empty-workflow"),
                       ("runs/", "ui-empty-runs")):
        page.goto(f"{live_server.url}/p/{project.slug}/{path}")
        page.wait_for_selector("[data-testid=empty-state]")
        check(name)
    check.assert_clean()


def test_hostile_trace_content_never_runs(live_server, page, project, owner, settings, axe_path):
    settings.CLEAR_JUDGE_MODEL = ""
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from tests.diagnosis.support import ingest_otlp

    ingest_otlp(project=project, body=evil_otlp_body(), content_type="application/json")
    diagnosis_run_execute(run=diagnosis_run_start(project=project, enqueue=False, judges=["rules"]))
    trace = Trace.objects.get(project=project, trace_id=EVIL_TRACE_ID)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, live_server.url)
    base = f"{live_server.url}/p/{project.slug}"
    urls = [f"{base}/", f"{base}/traces/", f"{base}/workflow/", f"{base}/nodes/", f"{base}/runs/",
            f"{base}/traces/{trace.trace_id}/"]
    urls += [f"{base}/traces/{trace.trace_id}/?span={span_id}"
             for span_id in trace.spans.values_list("span_id", flat=True)]
    for url in urls:
        page.goto(url)
        page.wait_for_load_state("load")
        page.wait_for_timeout(100)
        assert page.evaluate("typeof window.__pwned") == "undefined", url
        assert "pwned" not in page.title(), url
        assert page.locator("main script, main img, main iframe, main svg[onload]").count() == 0, url
        assert page.locator("a[href^='javascript:']").count() == 0, url
    # The payloads are there, as text.
    page.goto(f"{base}/traces/{trace.trace_id}/?span={'a' * 15 + '3'}")
    text = page.inner_text("[data-testid=span-detail]")
    assert "<script>window.__pwned = 1;" in text
    assert '<img src="x" onerror=' in text
    assert page.locator("[data-testid=span-detail] mark").count() >= 1, "the error quote is highlighted"
    screenshot(page, "ui-trace-hostile")
    page.goto(f"{base}/traces/{trace.trace_id}/?span={'a' * 15 + '1'}")
    assert "javascript:window.__pwned=4" in page.inner_text("[data-testid=span-output]")
    assert not dialogs
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_progress_bar_follows_a_running_run(live_server, page, project, owner, settings):
    """The run page polls the status JSON: a run judged while the page is open moves the bar, then the page
    shows the finished run."""
    settings.CLEAR_JUDGE_MODEL = ""
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from tests.diagnosis.support import support_desk_ingest

    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnosis_run_start(project=project, enqueue=False, judges=["rules"], name="slow run",
                              config={"trace_delay_seconds": 0.25})
    login(page, live_server.url)
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/")
    page.wait_for_selector("[data-testid=cancel-form]")
    assert page.get_attribute("[data-testid=run-progress]", "aria-valuenow") == "0"
    page.evaluate("""() => {
        const bar = document.querySelector('[data-testid=run-progress]');
        new MutationObserver(() => {
            const seen = JSON.parse(sessionStorage.getItem('seen') || '[]');
            seen.push(Number(bar.getAttribute('aria-valuenow')));
            sessionStorage.setItem('seen', JSON.stringify(seen));
        }).observe(bar, {attributes: true, attributeFilter: ['aria-valuenow']});
    }""")
    diagnosis_run_execute(run=run)  # judged here, in the test's thread, while the browser polls
    page.wait_for_selector("[data-testid=run-status] .pill.ok", timeout=30_000)  # reloaded once finished
    assert page.get_attribute("[data-testid=run-progress]", "aria-valuenow") == "100"
    assert "22 judged" in re.sub(r"\s+", " ", page.inner_text("[data-testid=progress-text]"))
    assert page.locator("[data-testid=cancel-form]").count() == 0
    seen = page.evaluate("JSON.parse(sessionStorage.getItem('seen') || '[]')")
    assert seen[-1] == 100 and any(0 < value < 100 for value in seen), seen  # it moved while the run ran
    assert seen == sorted(seen)
    screenshot(page, "ui-run-finished")
