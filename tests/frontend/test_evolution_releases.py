"""Evolution on what is live (issue 19), in the browser through a real worker: the example agent registered as a
hot-swap target is release zero; a job on the mediator_race insight is promoted on top of it; the release history
shows both; a job on the retry_loop insight starts from the live release, so its diff does not revert the first
fix; rolling back (a task, the page following it) returns to release zero with the health probes passing; the first
job then says its release was rolled back, and the second job, no longer based on what is live, cannot be approved
but starts again from release zero."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evolution.models import EvolutionJob, EvolutionTarget, ReleaseRollback
# The evolution tests' autouse fixture (artifacts in tmp, subprocess sandbox); importing the module also sets the
# worker's CLEAR_EVOLUTION_DIR before the session's worker starts.
from tests.evolution.conftest import evolution_dir  # noqa: F401
from tests.frontend.support import job_wait

ROOT = Path(__file__).resolve().parents[2]
RETRY_FIX = "examples/support_desk/evolution/retry_loop_fix.json"
MEDIATOR_TASKS = ["orders-and-next-bill", "track-two-packages", "two-how-to-questions", "two-orders-status"]
RETRY_TASKS = ["compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"]
MEDIATOR_FIX_LINE = "return sorted(results, key=lambda result: result.finished_at_ns)"


@pytest.fixture
def worker_evolution_dir(settings):
    """The worker reads CLEAR_EVOLUTION_DIR from its environment (tests/evolution/conftest.py sets it before it
    starts); the pages read what it writes from there."""
    settings.CLEAR_EVOLUTION_DIR = Path(os.environ["CLEAR_EVOLUTION_DIR"])
    return settings.CLEAR_EVOLUTION_DIR


def _wait_for(page, job_id: int, worker, *, states, timeout: float) -> EvolutionJob:
    """Until the job is in one of `states` (the job page follows it by itself)."""
    return job_wait(page, worker, job_of=lambda: EvolutionJob.objects.get(pk=job_id),
                    reached=lambda job: job.state in states, timeout=timeout, what=f"in {states}")


@pytest.mark.browser
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_issue_19_acceptance_releases_rollback_and_a_second_job_on_the_live_release(
        live_server, page, celery_worker, worker_evolution_dir, project, owner, tmp_path, axe_path):
    from evolution.deploy import hot_swap_config_validate, release_current_get
    from evolution.selectors import evolution_target_releases_root
    from evolution.services import evolution_target_add
    from examples.support_desk.target_repo import EVOLUTION_CONFIG, target_repo_make
    from tests.diagnosis.support import support_desk_ingest
    from tests.evolution.support import insight_for_traces
    from tests.frontend.support import Checker, login
    from traces.models import Trace

    target_repo_make(dest=tmp_path / "desk")  # mediator_race and retry_loop built in
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2",
                        task_ids=MEDIATOR_TASKS + RETRY_TASKS)
    failing = Trace.objects.filter(project=project, outcome="failure")
    race = insight_for_traces(project=project, node="mediator", traces=list(failing.filter(task_id__in=MEDIATOR_TASKS)),
                              title="The mediator drops a finding when two tool results complete together")
    retry = insight_for_traces(project=project, node="billing_worker",
                               traces=list(failing.filter(task_id__in=RETRY_TASKS)),
                               title="The billing worker re-sends a rate-limited invoice lookup at once")
    assert race.trace_count == 4 and retry.trace_count == 3
    # One trial per task (the desk is deterministic per seed) and a short health window keep this quick.
    config = {**EVOLUTION_CONFIG, "trials": 1,
              "scripted_fixtures": [*EVOLUTION_CONFIG["scripted_fixtures"], RETRY_FIX],
              "hot_swap": {**EVOLUTION_CONFIG["hot_swap"],
                           "health": {"interval_s": 1, "window_s": 30, "passes_required": 2}}}

    check = Checker(page, axe_path)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def evolve(insight, script: str) -> EvolutionJob:
        page.goto(f"{live_server.url}/p/{project.slug}/insights/{insight.pk}/")
        page.click("[data-testid=evolve]")
        page.wait_for_selector("[data-testid=evolve-form]")
        page.select_option("#id_mode", "hot_swap")
        page.check(f"input[name=fixture][value='{script}']")
        assert page.input_value("#id_script") == script
        page.click("[data-testid=evolve-submit]")
        page.wait_for_selector("[data-testid=job-state]")
        return EvolutionJob.objects.filter(project=project, insight=insight).order_by("-pk").first()

    login(page, live_server.url)
    base = f"{live_server.url}/p/{project.slug}/evolution"
    # A hot-swap config is the operator's to set (manage.py evolution_target add): the API and the form refuse it.
    evolution_target_add(operator=True, project=project, name="support_desk", source=str(tmp_path / "desk"),
                         config=config)
    page.goto(base + "/targets/")
    page.wait_for_selector("[data-testid=target-table]")
    target = EvolutionTarget.objects.get(project=project, name="support_desk")
    root = evolution_target_releases_root(target=target)
    section = f"[data-testid=releases][data-target='{target.pk}']"

    # Registering the target recorded its code as release zero: current and last good.
    zero = release_current_get(releases_root=root)
    assert zero and zero.startswith("release-0-"), zero
    page.goto(base + "/releases/")
    assert page.inner_text(f"{section} [data-testid=current-release]") == zero
    assert "release zero" in page.inner_text(f"{section} tr[data-release='{zero}']")
    check("evolution-releases-zero")

    try:
        # 1. Evolve the mediator_race insight, hot swap, approve: promoted on top of release zero.
        job1 = evolve(race, "examples/support_desk/evolution/mediator_race_fix.json")
        assert job1.base_release.release_id == zero
        assert page.inner_text("[data-testid=based-on]") == f"Based on release {zero}"
        _wait_for(page, job1.pk, celery_worker, states=["AWAITING_CONSENT"], timeout=600)
        page.wait_for_selector("[data-testid=approve]")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("[data-testid=approve]")
        job1 = _wait_for(page, job1.pk, celery_worker, states=["PROMOTED"], timeout=300)
        assert job1.terminal_reason == "healthy", job1.error
        first = f"job-{job1.pk}-{job1.best_iteration.candidate_commit[:12]}"
        assert release_current_get(releases_root=root) == first

        # The release history: release zero and the new one, which is current.
        page.goto(base + "/releases/")
        assert page.inner_text(f"{section} [data-testid=current-release]") == first
        for release in (zero, first):
            assert page.locator(f"{section} [data-testid=release-table] tr[data-release='{release}']").count() == 1
        assert f"job {job1.pk}" in page.inner_text(f"{section} tr[data-release='{first}']")
        check("evolution-releases-promoted")

        # The insight shows its live fix; Evolve on it asks for confirmation (refused without the checkbox).
        page.goto(f"{live_server.url}/p/{project.slug}/insights/{race.pk}/")
        note = page.inner_text("[data-testid=insight-fix-note]")
        assert "Fix live since" in note and first in note and "watching 0 judged traces" in note, note
        check("evolution-insight-fix-live")
        page.click("[data-testid=evolve]")
        assert "Fix live since" in page.inner_text("[data-testid=evolve-fix-warning]")
        page.select_option("#id_mode", "hot_swap")
        page.click("[data-testid=evolve-submit]")
        page.wait_for_selector("[data-testid=evolve-fix-warning] .field-error")
        assert EvolutionJob.objects.filter(project=project).count() == 1
        check("evolution-evolve-confirm")

        # 2. A job on another insight starts from the live release: its diff keeps the first fix.
        job2 = evolve(retry, RETRY_FIX)
        assert job2.base_release.release_id == first and job2.base_commit == job1.best_iteration.candidate_commit
        _wait_for(page, job2.pk, celery_worker, states=["AWAITING_CONSENT"], timeout=600)
        page.goto(f"{base}/jobs/{job2.pk}/")
        assert page.inner_text("[data-testid=based-on]") == f"Based on release {first}"
        removed = page.locator("[data-testid=diff] .diff-del").all_inner_texts()
        added = page.locator("[data-testid=diff] .diff-add").all_inner_texts()
        assert not any(MEDIATOR_FIX_LINE in line for line in removed), removed
        assert any("yield Sleep(" in line for line in added), added
        assert "mediator.py" not in page.inner_text("[data-testid=diff]")

        # 3. Roll back to release zero: a worker does it, the page follows it to its end.
        page.goto(base + "/releases/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f"{section} tr[data-release='{zero}'] [data-testid=rollback-form] button")
        page.wait_for_selector(f"{section} [data-testid=rollback-status]")
        page.wait_for_selector(f"{section} [data-testid=rollback-status][data-status=succeeded]", timeout=120_000)
        rollback = ReleaseRollback.objects.get(target=target)
        assert (rollback.outcome, rollback.active_release) == ("rolled_back", zero), rollback.detail
        assert rollback.result["rollback_health"]["healthy"]  # the health probes pass on release zero
        assert release_current_get(releases_root=root) == zero
        assert page.inner_text(f"{section} [data-testid=current-release]") == zero
        assert f"back on {zero}, which passed its health check" in page.inner_text(
            f"{section} [data-testid=rollback-status]")
        assert page.locator(f"{section} tr[data-release='{first}'] [data-testid=release-rolled-back]").count() == 1
        check("evolution-releases-rolled-back")

        # The first job says its release was rolled back, in the list and on its page; its fix is no longer live.
        page.goto(base + "/")
        assert page.locator(f"tr[data-job='{job1.pk}'] [data-testid=release-rolled-back]").count() == 1
        assert page.locator(f"tr[data-job='{job2.pk}'] [data-testid=release-rolled-back]").count() == 0
        check("evolution-jobs-rolled-back")
        page.goto(f"{base}/jobs/{job1.pk}/")
        assert page.locator("[data-testid=job-base] [data-testid=release-rolled-back]").count() == 1
        assert "no longer live" in page.inner_text("[data-testid=job-state]")  # not "the fix is live" (issue 26)
        check("evolution-job-rolled-back")
        page.goto(f"{live_server.url}/p/{project.slug}/insights/{race.pk}/")
        # no live fix, but the page still says one was promoted and rolled back (issue 40)
        note = page.locator("[data-testid=insight-fix-note]")
        assert note.get_attribute("data-kind") == "rolled_back" and "rolled back" in note.inner_text()

        # 4. The second job was built on a release no longer live: approving is refused, it starts again from zero.
        page.goto(f"{base}/jobs/{job2.pk}/")
        assert first in page.inner_text("[data-testid=base-stale]")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("[data-testid=approve]")
        page.wait_for_selector(".flash.error")
        assert "is live now" in page.inner_text(".flash.error")
        assert EvolutionJob.objects.get(pk=job2.pk).state == "AWAITING_CONSENT"
        check("evolution-job-base-stale")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("[data-testid=restart]")
        # The stale job's page has a based-on line too, and its poll sees the job cancelled while the restart is
        # sent (clear.js must not reload over the submission): wait for the new job's page.
        page.wait_for_url(lambda url: "/jobs/" in url and f"/jobs/{job2.pk}/" not in url, timeout=30_000)
        page.wait_for_selector("[data-testid=based-on]")
        job3 = EvolutionJob.objects.filter(project=project).order_by("-pk").first()
        assert job3.pk != job2.pk and f"/jobs/{job3.pk}/" in page.url
        assert (EvolutionJob.objects.get(pk=job2.pk).state, job3.base_release.release_id) == ("CANCELLED", zero)
        assert page.inner_text("[data-testid=based-on]") == f"Based on release {zero}"
        job3.stop_requested = True  # nothing more to see: let the worker drop it at its next stage
        job3.save(update_fields=["stop_requested"])
    finally:
        hot_swap_config_validate(target.config["hot_swap"]).build(releases_root=root).activator.stop()
    assert not errors, errors
    check.assert_clean()
