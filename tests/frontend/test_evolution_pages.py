"""Evolution pages: the Evolve form from an insight or a ticket, a job's page in several states (a real scripted run
of the fixture router repository to AWAITING_CONSENT, then approved), untrusted plan/review/diff text escaped, the
jobs list at a constant query count, targets registered and edited with per-field errors, the release history."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.tickets.models import Ticket
from evolution.models import Artifact, EvolutionJob, EvolutionTarget, Iteration, StageRun
from evolution.selectors import evolution_target_releases_root
from evolution.services import evolution_job_start
from evolution.services.workspace import artifact_store
# The evolution tests' fixtures: artifacts in tmp, the fixture router repository as a target, an insight of its
# failing traces.
from tests.evolution.conftest import evolution_dir, refund_insight, router_remote, router_target  # noqa: F401
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, replace_edit
from tests.evolution.support import form_post, happy_entries, insight_for_traces, script_write
from tests.frontend.conftest import client_for


pytestmark = pytest.mark.django_db

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
FIXTURES = Path(__file__).resolve().parents[2] / "examples" / "support_desk" / "evolution"
DESK_CONFIG = {"editable_paths": ["support_desk/**"], "grader_command": "python grading/grade.py --out {out}",
               "trial_command": "python -m support_desk run-task --task {task_id} --seed {seed} --out {out}/r.json",
               "scripted_fixtures": [str(FIXTURES / "mediator_race_fix.json"),
                                     str(FIXTURES / "mediator_race_breaks_misroute.json")]}


@pytest.fixture
def remote(router_remote):
    return router_remote


@pytest.fixture
def target(router_target):
    return router_target


@pytest.fixture
def insight(refund_insight):
    return refund_insight


@pytest.fixture
def client(owner):
    return client_for(owner)


def _url(project, tail: str) -> str:
    return f"/p/{project.slug}/evolution/{tail}"


def test_evolve_from_an_insight_and_from_a_ticket(client, project, owner, target, insight, tmp_path, outsider):
    desk = EvolutionTarget.objects.create(project=project, name="support_desk", source=str(tmp_path),
                                          config=DESK_CONFIG)
    page = client.get(_url(project, f"new/?insight={insight.pk}"))
    assert page.status_code == 200
    html = page.content.decode()
    assert insight.title in html and 'name="csrfmiddlewaretoken"' in html
    for option in ("router", "support_desk", "scripted", "litellm", "external", "shallow", "hot_swap"):
        assert option in html
    # The support desk is registered: the scripted fixtures its config lists are offered, the first one chosen.
    assert "mediator_race_fix.json" in html and "mediator_race_breaks_misroute.json" in html
    assert "support_desk: mediator_race_breaks_misroute" in html
    assert f'name="fixture" value="{FIXTURES / "mediator_race_fix.json"}" data-fills="id_script" checked' in html

    # The scripted backend without a script: 400 naming it; nothing is created.
    refused = client.post(_url(project, "new/"), {"insight": insight.pk, "target": target.pk, "backend": "scripted",
                                                  "depth": "shallow", "mode": "pr", "script": ""})
    assert refused.status_code == 400 and "needs a script" in refused.content.decode()
    hot = client.post(_url(project, "new/"), {"insight": insight.pk, "target": target.pk, "backend": "scripted",
                                              "depth": "shallow", "mode": "hot_swap", "script": "/x.json"})
    assert hot.status_code == 400 and "no hot_swap section" in hot.content.decode()
    assert not EvolutionJob.objects.exists()

    # "Check the backend" runs its preflight only.
    check = {"insight": insight.pk, "target": target.pk, "depth": "shallow", "mode": "pr", "preflight": "1"}
    unusable = client.post(_url(project, "new/"), {**check, "backend": "litellm", "backend_config": "{}"})
    assert unusable.status_code == 200 and "Backend litellm is not usable: no model configured" in \
        unusable.content.decode()
    fixture = client.post(_url(project, "new/"), {**check, "target": desk.pk, "backend": "scripted",
                                                 "fixture": str(FIXTURES / "mediator_race_fix.json")})
    assert "Backend scripted is ready: scripted (" in fixture.content.decode()
    # A script the target's operator did not list is not read, not even for the check.
    elsewhere = client.post(_url(project, "new/"), {**check, "backend": "scripted",
                                                   "fixture": str(FIXTURES / "mediator_race_fix.json")})
    assert "not one of the scripts the operator listed" in elsewhere.content.decode()
    assert client.post(_url(project, "new/"), {**check, "backend": "litellm", "backend_config": "[1]"}) \
        .status_code == 400
    assert not EvolutionJob.objects.exists()

    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    # The form reads only the scripts the operator listed for the target: any other path is refused.
    refused = client.post(_url(project, "new/"), {"insight": insight.pk, "target": target.pk, "backend": "scripted",
                                                  "depth": "shallow", "mode": "pr", "script": str(script)})
    assert refused.status_code == 400 and "scripted_fixtures" in refused.content.decode()
    EvolutionTarget.objects.filter(pk=target.pk).update(config={**target.config, "scripted_fixtures": [str(script)]})
    done = client.post(_url(project, "new/"), {"insight": insight.pk, "target": target.pk, "backend": "scripted",
                                               "depth": "shallow", "mode": "pr", "fixture": str(script)})
    job = EvolutionJob.objects.get()
    assert done.status_code == 302 and done["Location"] == _url(project, f"jobs/{job.pk}/")
    assert (job.backend_config, job.depth, job.created_by, job.ticket_id) == (
        {"script_path": str(script)}, "shallow", owner, None)
    assert job.config_snapshot["mode"] == "pr"

    # From a ticket: the ticket's insight, the ticket recorded; a busy target says so.
    ticket = Ticket.objects.create(project=project, insight=insight, fingerprint="f", title="refunds", level="node",
                                   node="router", severity="high")
    form = client.get(_url(project, f"new/?ticket={ticket.pk}")).content.decode()
    assert f'name="ticket" value="{ticket.pk}"' in form and "router (busy)" in form
    busy = client.post(_url(project, "new/"), {"ticket": ticket.pk, "target": target.pk, "backend": "scripted",
                                               "depth": "shallow", "mode": "pr", "script": str(script)})
    assert busy.status_code == 400 and "already has an active job" in busy.content.decode()
    assert client.get(_url(project, "new/")).status_code == 404
    assert client_for(outsider).get(_url(project, f"new/?insight={insight.pk}")).status_code == 404

    # The Evolve buttons lead here.
    insight_page = client.get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert f"/evolution/new/?insight={insight.pk}" in insight_page
    tickets_page = client.get(f"/p/{project.slug}/tickets/").content.decode()
    assert f"/evolution/new/?ticket={ticket.pk}" in tickets_page


def test_a_job_page_through_its_states(client, project, owner, target, insight, tmp_path,
                                       django_capture_on_commit_callbacks):
    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    job = evolution_job_start(project=project, target=target, insight=insight, backend_name="scripted",
                              backend_config={"script_path": str(script)}, depth="shallow", created_by=owner)
    queued = client.get(_url(project, f"jobs/{job.pk}/")).content.decode()
    assert "QUEUED" in queued and "data-evolution-poll" in queued and "No stage has started yet" in queued
    status = client.get(_url(project, f"jobs/{job.pk}/status.json")).json()
    assert (status["state"], status["terminal"]) == ("QUEUED", False)
    EvolutionJob.objects.filter(pk=job.pk).delete()

    with django_capture_on_commit_callbacks(execute=True):
        job = evolution_job_start(project=project, target=target, insight=insight, backend_name="scripted",
                                  backend_config={"script_path": str(script)}, depth="shallow", created_by=owner)
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT", job.error
    html = client.get(_url(project, f"jobs/{job.pk}/")).content.decode()
    for text in ('data-stage="prepare"', 'data-stage="verdict"', "PROMOTE_ELIGIBLE", "G1_target_delta",
                 "G2_per_task", "diff_budget", 'data-task="refund-damaged"', "route refund requests to the refunds",
                 "Refunds go to billing", 'class="diff-add">+        return &quot;refunds&quot;', "patch-0.diff",
                 job.best_iteration.patch_sha256, 'data-testid="approve-form"', 'data-testid="discard-form"',
                 f"/p/{project.slug}/traces/{job.tasks.filter(kind='target').first().trace_id}/",
                 "(scripted ("):
        assert text in html, text
    assert "data-evolution-poll" in html  # another person (or the API) may decide meanwhile

    # A stale hash is refused with the orchestrator's message; the job still waits.
    stale = client.post(_url(project, f"jobs/{job.pk}/approve/"), {"patch_sha256": "0" * 64}, follow=True)
    assert "review the current diff and approve again" in stale.content.decode()
    assert EvolutionJob.objects.get(pk=job.pk).state == "AWAITING_CONSENT"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(_url(project, f"jobs/{job.pk}/approve/"), {"patch_sha256": job.best_iteration.patch_sha256})
    html = client.get(_url(project, f"jobs/{job.pk}/")).content.decode()
    assert "PR_OPENED" in html and f"evo/{job.pk}/1" in html and f"Approved by {owner.email}" in html
    assert 'data-testid="approve-form"' not in html and 'data-testid="job-cancel-form"' not in html
    assert "data-evolution-poll" not in html  # ended: nothing more to follow
    assert 'data-testid="merged-form"' in html
    watching = client.post(_url(project, f"jobs/{job.pk}/merged/"), {"release": "v3"}, follow=True).content.decode()
    assert "Watching release v3" in watching and 'data-testid="insight-fix"' in watching
    assert 'data-testid="merged-form"' not in watching

    patch = Artifact.objects.filter(job=job, kind="patch").last()
    download = client.get(_url(project, f"jobs/{job.pk}/artifacts/{patch.pk}/"))
    assert download["Content-Type"] == "application/octet-stream" and b"refunds" in download.content

    # A failed job shows why; cancelling it again says it ended.
    failed = EvolutionJob.objects.create(project=project, target=EvolutionTarget.objects.create(
        project=project, name="other", source="/x", config=CONFIG), insight=insight, backend_name="scripted",
        state="FAILED", terminal_reason="prepare:git_error", error="fatal: repository '/x' does not exist")
    html = client.get(_url(project, f"jobs/{failed.pk}/")).content.decode()
    assert "prepare:git_error" in html and "repository &#x27;/x&#x27; does not exist" in html
    again = client.post(_url(project, f"jobs/{failed.pk}/cancel/"), follow=True).content.decode()
    assert "already ended" in again


def test_untrusted_plan_review_and_diff_text_is_escaped(client, project, insight):
    target = EvolutionTarget.objects.create(project=project, name=f"t {EVIL}", source="/x", config=CONFIG)
    job = EvolutionJob.objects.create(project=project, target=target, insight=insight, backend_name="scripted",
                                      state="AWAITING_CONSENT", error=EVIL)
    it = Iteration.objects.create(job=job, n=1, base_commit="a" * 40, candidate_commit="b" * 40,
                                  patch_sha256="c" * 64, status="evaluated", verdict="PROMOTE_ELIGIBLE",
                                  metrics={"gates": [{"name": "paths", "passed": False, "detail": EVIL,
                                                      "offending": [EVIL]}]})
    EvolutionJob.objects.filter(pk=job.pk).update(best_iteration=it)
    StageRun.objects.create(job=job, iteration=it, iteration_n=1, stage="plan", claim="x", status="failed",
                            error=EVIL, outcome=EVIL[:40])
    artifact_store(job=job, iteration=it, kind="plan", name="plan-0.json", content={
        "changes": [{"file": EVIL, "symbol": EVIL, "change": EVIL, "rationale": EVIL}], "risks": [EVIL],
        "tests_to_add": [EVIL], "per_task_impact": [{"task_id": EVIL, "prediction": "risk", "why": EVIL}]})
    artifact_store(job=job, iteration=it, kind="diagnosis", name="diagnosis.json", content={
        "clusters": [{"title": EVIL, "root_cause": EVIL, "evidence": [{"file": EVIL, "line": 1, "quote": EVIL}]}]})
    artifact_store(job=job, iteration=it, kind="plan_review", name="plan_review-0.json",
                   content={"verdict": EVIL, "issues": [{"severity": EVIL, "detail": EVIL, "required_change": EVIL}]})
    artifact_store(job=job, iteration=it, kind="code_review", name="code_review-0.json",
                   content={"verdict": "APPROVE", "issues": [{"severity": "minor", "file": EVIL, "detail": EVIL}]})
    artifact_store(job=job, iteration=it, kind="implementer", name="implementer-0.json",
                   content={"status": EVIL, "summary": EVIL, "deviations": [EVIL]})
    artifact_store(job=job, iteration=it, kind="patch", name=f"{EVIL}.diff", mime="text/x-diff",
                   content=f"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-{EVIL}\n+{EVIL}\n")
    html = client.get(_url(project, f"jobs/{job.pk}/")).content.decode()
    assert "<script>window" not in html and "<img src=x" not in html
    escaped = "&lt;script&gt;window.__pwned=1&lt;/script&gt;"
    assert html.count(escaped) >= 15, html.count(escaped)
    assert f'class="diff-add">+{escaped}' in html and f'class="diff-del">-{escaped}' in html
    for page in ("", "targets/", f"targets/{target.pk}/", "releases/"):
        body = client.get(_url(project, page)).content.decode()
        assert "<script>window" not in body and "<img src=x" not in body, page


def _jobs(project, insight, n: int, offset: int) -> None:
    for i in range(offset, offset + n):
        target = EvolutionTarget.objects.create(project=project, name=f"target {i}", source="/x", config=CONFIG)
        job = EvolutionJob.objects.create(project=project, target=target, insight=insight, backend_name="scripted",
                                          state="NO_IMPROVEMENT" if i % 2 else "QUEUED")
        it = Iteration.objects.create(job=job, n=1, base_commit="a" * 40, verdict="NO_IMPROVEMENT", score=0.5)
        EvolutionJob.objects.filter(pk=job.pk).update(best_iteration=it)


def test_the_jobs_list_costs_the_same_queries_for_2_or_20_jobs(client, project, insight):
    client.get(_url(project, ""))  # warm up: the first page view of a project writes it into the session
    counts = []
    client.get(_url(project, ""))  # the first page a session sees also records it (last_project)
    for n, offset in ((2, 0), (18, 2)):
        _jobs(project, insight, n, offset)
        with CaptureQueriesContext(connection) as queries:
            page = client.get(_url(project, ""))
        assert page.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
    html = page.content.decode()
    assert html.count('data-job="') == 20
    filtered = client.get(_url(project, "?state=QUEUED")).content.decode()
    assert filtered.count('data-job="') == 10
    assert client.get(_url(project, "?state=active")).content.decode().count('data-job="') == 10
    one = EvolutionTarget.objects.get(name="target 3")
    assert client.get(_url(project, f"?target={one.pk}")).content.decode().count('data-job="') == 1
    assert client.get(_url(project, f"?insight={insight.pk}")).content.decode().count('data-job="') == 20
    assert client.get(_url(project, f"?insight={insight.pk + 1}")).content.decode().count('data-job="') == 0
    assert f"?insight={insight.pk}" in client.get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()


def test_targets_registered_and_edited_with_every_bad_field_named(client, project, remote, settings):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(remote.parent)]  # the operator opened the test's directory
    empty = client.get(_url(project, "targets/")).content.decode()
    assert "No target yet" in empty
    bad = {**CONFIG, "trial_command": "python run.py", "diff_budget": {"max_files": 0}, "colour": "blue"}
    refused = client.post(_url(project, "targets/"), {"name": "router", "source": str(remote),
                                                     "config": json.dumps(bad)})
    assert refused.status_code == 400
    html = refused.content.decode()
    # The config's own bad fields are named at once (the commands wait for the repository, read by a worker).
    for field in ("<code>diff_budget.max_files</code>", "<code>colour</code>"):
        assert field in html, field
    assert "python run.py" in html  # the typed config is kept for fixing
    assert client.post(_url(project, "targets/"), {"name": "router", "source": str(remote),
                                                   "config": "{not json"}).status_code == 400
    # trial_command is the repository's (only the operator sets another): the target fails, its page says why.
    other = form_post(client, _url(project, "targets/"), {
        "name": "other", "source": str(remote), "config": json.dumps({**CONFIG, "trial_command": "python run.py"})})
    assert other.status_code == 302
    failed = EvolutionTarget.objects.get(project=project, name="other")
    assert failed.state == "failed" and failed.config == {}
    page = client.get(_url(project, f"targets/{failed.pk}/")).content.decode()
    assert 'data-state="failed"' in page and "config.trial_command" in page
    assert "only the operator can set another value" in page

    # Blank config: the repository's evolution.json.
    done = form_post(client, _url(project, "targets/"), {"name": "router", "source": str(remote), "config": ""})
    assert done.status_code == 302
    target = EvolutionTarget.objects.get(project=project, name="router")
    assert target.state == "ready" and target.config["trial_command"] == CONFIG["trial_command"]
    listing = client.get(_url(project, "targets/")).content.decode()
    assert f'data-target="{target.pk}"' in listing and "PR only" in listing

    edit_url = _url(project, f"targets/{target.pk}/")
    page = client.get(edit_url).content.decode()
    assert "&quot;trial_command&quot;" in page
    wrong = client.post(edit_url, {"source": str(remote), "config": json.dumps({**CONFIG, "trials": 0})})
    assert wrong.status_code == 400 and "<code>trials</code>" in wrong.content.decode()
    outside = client.post(edit_url, {"source": str(remote), "push_url": "/tmp/pr.git",
                                     "config": json.dumps({**CONFIG, "trials": 1})})
    assert outside.status_code == 400 and "CLEAR_EVOLUTION_SOURCE_ROOTS" in outside.content.decode()
    saved = client.post(edit_url, {"source": str(remote), "push_url": "ssh://git@git.example.com/pr.git",
                                   "config": json.dumps({**CONFIG, "trials": 1})})
    assert saved.status_code == 302
    target.refresh_from_db()
    assert (target.config["trials"], target.push_url) == (1, "ssh://git@git.example.com/pr.git")


HOT_SWAP = {"activator": {"kind": "process", "command": "python -c 'import time; time.sleep(600)'",
                          "stop_timeout_s": 5},
            "probes": [{"kind": "process_alive"}],
            "health": {"interval_s": 0.2, "window_s": 4, "passes_required": 2}}


def releases_made(*, target, tmp_path) -> None:
    """Two releases of a hot-swap target: r1 healthy (last good), then r2 swapped in (current)."""
    from evolution.deploy import release_mark_healthy, release_stage, release_swap

    root = evolution_target_releases_root(target=target)
    for release in ("r1", "r2"):
        source = tmp_path / release
        source.mkdir()
        (source / "agent.py").write_text(f"# {release}\n")
        release_stage(releases_root=root, release_id=release, source_dir=source)
        release_swap(releases_root=root, release_id=release, reason=f"job for {release}")
        if release == "r1":
            release_mark_healthy(releases_root=root, release_id="r1")


def activator_stop(target) -> None:
    from evolution.deploy import hot_swap_config_validate

    hot_swap_config_validate(HOT_SWAP).build(releases_root=evolution_target_releases_root(target=target)) \
        .activator.stop()


def test_release_history_and_one_click_rollback(client, project, tmp_path, django_capture_on_commit_callbacks):
    plain = EvolutionTarget.objects.create(project=project, name="plain", source="/x", config=CONFIG)
    hot = EvolutionTarget.objects.create(project=project, name="desk", source="/x",
                                         config={**CONFIG, "hot_swap": HOT_SWAP})
    releases_made(target=hot, tmp_path=tmp_path)
    html = client.get(_url(project, "releases/")).content.decode()
    assert f'data-target="{plain.pk}"' in html and "Not configured for hot swap" in html
    assert 'data-testid="current-release">r2<' in html and "job for r2" in html and "job for r1" in html
    assert html.index("job for r2") < html.index("job for r1")  # newest swap first
    assert html.count('data-testid="rollback-form"') == 1  # r1: healthy and not current
    assert 'name="to_release" value="r1"' in html

    # A job deploying to the target holds the rollback back.
    job = EvolutionJob.objects.create(project=project, target=hot, insight=insight_for_traces(
        project=project, traces=[], title="x"), backend_name="scripted", state="HEALTH_CHECK")
    refused = client.post(_url(project, f"releases/{hot.pk}/rollback/"), {"to_release": "r1"}, follow=True)
    assert f"Job {job.pk} is deploying" in refused.content.decode()
    EvolutionJob.objects.filter(pk=job.pk).update(state="PROMOTED")
    try:
        # The request only queues it (a worker runs it, here eagerly on commit); the page shows its status.
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            queued = client.post(_url(project, f"releases/{hot.pk}/rollback/"), {"to_release": "r1"}, follow=True)
            html = queued.content.decode()
            assert "rolling back to r1" in html and 'data-status="queued"' in html and "data-evolution-poll" in html
        assert len(callbacks) == 1
        body = client.get(_url(project, "releases/")).content.decode()
        assert 'data-testid="rollback-status" data-status="succeeded"' in body and "data-evolution-poll" not in body
        assert "back on r1, which passed its health check" in body, body[:3000]
        assert 'data-testid="current-release">r1<' in body and "manual rollback by alice@example.com" in body
        assert (evolution_target_releases_root(target=hot) / "current").resolve().name == "r1"
    finally:
        activator_stop(hot)
    # A target without hot swap has nothing to roll back.
    nothing = client.post(_url(project, f"releases/{plain.pk}/rollback/"), follow=True).content.decode()
    assert "no hot_swap section" in nothing


# --- the job page for a reviewer, in the browser -------------------------------------------------------------------

# Internal names that stay out of the page's visible text (they are tooltips, or nowhere).
JARGON = ("G0_", "G1_", "G2_", "pass^n", "fail^n", "§7.10", "evolution.md", "diff_budget", "reviewer_veto")


def reviewer_layout_check(page) -> dict:
    """At 1280×800: the verdict and the decision first, then the diff (within the first two screens), the per-task
    scores and the checks; everything else folded. Returns the sections' top offsets."""
    page.set_viewport_size({"width": 1280, "height": 800})
    top = {name: page.locator(selector).first.evaluate("e => e.getBoundingClientRect().top + window.scrollY")
           for name, selector in (("decision", "[data-testid=decision]"), ("diff", "[data-testid=diff]"),
                                  ("tasks", "[data-testid=task-table]"), ("checks", "[data-testid=gate-table]"),
                                  ("folded", "[data-testid=folded]"))}
    assert top["decision"] < top["diff"] < top["tasks"] < top["checks"] < top["folded"], top
    assert top["diff"] < 2 * 800, top  # the diff is on the first or the second screen
    assert page.locator("[data-testid=verdict] >> text=Verdict").count() == 1
    for fold in ("plan-fold", "reviews-fold", "timeline-fold", "artifacts-fold", "events-fold"):
        assert page.locator(f"[data-testid={fold}]").get_attribute("open") is None, fold
    text = page.inner_text("main")
    assert not [word for word in JARGON if word in text], [word for word in JARGON if word in text]
    # The gates' code names are their rows' tooltips.
    assert page.locator("[data-check=G2_no_flips] td[title=G2_no_flips]").count() == 1
    assert page.locator("[data-check=diff_budget] td[title=diff_budget]").count() == 1
    return top


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_job_page_shows_a_reviewer_the_decision_and_the_diff_first(live_server, page, project, owner, target,
                                                                       insight, tmp_path, axe_path):
    """The router fixture's job, run inline to AWAITING_CONSENT: at 1280×800 the verdict, the decision and the diff
    come first, the gates are in words, the rest is folded; approving asks first, naming the patch's sha256, by
    keyboard too; axe finds nothing serious."""
    from tests.frontend.support import axe_violations, describe, login
    from tests.support.browser import screenshot

    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    job = evolution_job_start(project=project, target=target, insight=insight, backend_name="scripted",
                              backend_config={"script_path": str(script)}, depth="shallow", created_by=owner)
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT", job.error
    sha = job.best_iteration.patch_sha256
    login(page, live_server.url)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/p/{project.slug}/evolution/jobs/{job.pk}/")
    reviewer_layout_check(page)
    assert page.inner_text("[data-testid=job-state]").split() == ["AWAITING_CONSENT", "awaiting", "your", "decision"]
    assert page.inner_text("[data-testid=verdict-decision]") == "PROMOTE_ELIGIBLE"
    assert "fixes 3 of the 3 failing tasks" in page.inner_text("[data-testid=verdict-summary]")
    assert page.locator("[data-testid=diff]").is_visible()
    violations = axe_violations(page, axe_path)
    screenshot(page, "evolution-job-reviewer")
    assert not violations, describe(violations)

    # The folded sections open by keyboard.
    page.focus("[data-testid=plan-fold] > summary")
    page.keyboard.press("Enter")
    assert page.locator("[data-testid=plan]").is_visible()
    assert page.locator("[data-testid=events-fold] [data-testid=events]").is_hidden()

    # Approve asks first and names the patch: dismissed, nothing happens; from the keyboard, accepted, it promotes.
    dialogs: list[str] = []
    page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.click("[data-testid=approve]")
    page.wait_for_timeout(300)
    assert len(dialogs) == 1 and sha in dialogs[0] and "push the branch" in dialogs[0], dialogs
    assert EvolutionJob.objects.get(pk=job.pk).state == "AWAITING_CONSENT"
    assert page.get_attribute("[data-testid=approve]", "aria-describedby") == "patch-sha-line"
    page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    page.focus("[data-testid=approve]")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=job-state]:has-text('PR_OPENED')")
    assert len(dialogs) == 2 and sha in dialogs[1]
    assert page.inner_text("[data-testid=pr-branch]") == f"evo/{job.pk}/1"
    violations = axe_violations(page, axe_path)
    screenshot(page, "evolution-job-reviewer-pr-opened")
    assert not violations, describe(violations)


# --- in the browser, through a real worker: the example agent's mediator_race insight to PROMOTE_ELIGIBLE --------

@pytest.fixture
def worker_evolution_dir(settings):
    """The worker process reads CLEAR_EVOLUTION_DIR from its environment (set by tests/evolution/conftest.py before it
    started); the pages read the artifacts it writes from there."""
    settings.CLEAR_EVOLUTION_DIR = Path(os.environ["CLEAR_EVOLUTION_DIR"])
    return settings.CLEAR_EVOLUTION_DIR


@pytest.mark.browser
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_evolve_the_mediator_race_insight_in_the_browser(live_server, page, celery_worker, worker_evolution_dir,
                                                         project, owner, tmp_path, axe_path):
    from evolution.services import evolution_target_add
    from examples.support_desk.target_repo import target_repo_make
    from tests.diagnosis.support import support_desk_ingest
    from tests.evolution.support import insight_for_traces
    from tests.frontend.support import Checker, login
    from traces.models import Trace

    target_repo_make(dest=tmp_path / "desk")  # mediator_race and retry_loop built in, misroute fixed
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2",
                        task_ids=["orders-and-next-bill", "track-two-packages", "two-how-to-questions",
                                  "two-orders-status"])
    insight = insight_for_traces(project=project, node="mediator",
                                 traces=list(Trace.objects.filter(project=project, outcome="failure")),
                                 title="The mediator drops a finding when two tool results complete together")
    check = Checker(page, axe_path)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    login(page, live_server.url)
    base = f"{live_server.url}/p/{project.slug}/evolution"
    # The operator registers the example agent (its evolution.json sets hot_swap and scripted_fixtures, which only
    # `manage.py evolution_target add` may); the page lists it...
    evolution_target_add(operator=True, project=project, name="support_desk", source=str(tmp_path / "desk"))
    page.goto(base + "/targets/")
    page.wait_for_selector("[data-testid=target-table]")
    check("evolution-targets")
    # ...then edit its config: a bad value is named, one trial per task (the desk is deterministic per seed) is saved.
    page.click("[data-testid=target-table] >> text=support_desk")
    config = json.loads(page.input_value("#id_config"))
    page.fill("#id_config", json.dumps({**config, "trials": 0}))
    page.click("[data-testid=target-save]")
    assert "trials" in page.inner_text("[data-testid=config-errors]")
    check("evolution-target-error")
    page.fill("#id_config", json.dumps({**config, "trials": 1}, indent=2))
    page.click("[data-testid=target-save]")
    page.wait_for_selector(".flash.success")

    # Evolve on the insight: the form offers the desk's scripted fixtures, the fixing one chosen.
    page.goto(f"{live_server.url}/p/{project.slug}/insights/{insight.pk}/")
    page.click("[data-testid=evolve]")
    page.wait_for_selector("[data-testid=evolve-form]")
    assert page.locator("input[name=fixture][value$='mediator_race_fix.json']").is_checked()
    assert page.input_value("#id_script").endswith("mediator_race_fix.json")
    check("evolution-evolve-form")
    page.click("[data-testid=evolve-submit]")
    page.wait_for_selector("[data-testid=job-state]")
    assert "/evolution/jobs/" in page.url
    check("evolution-job-running")

    # The page follows the job through the worker (it reloads on each state change) to the verdict.
    _wait_for_verdict(page, project, celery_worker, timeout=420)
    assert "AWAITING_CONSENT" in page.inner_text("[data-testid=job-state]")
    for section in ("stage-timeline", "gate-table", "task-table", "diff", "plan", "plan-review", "code-review"):
        assert page.locator(f"[data-testid={section}]").count() == 1, section
    assert page.locator("[data-testid=task-table] tr[data-task='two-orders-status']").count() == 1
    assert page.locator("[data-testid=diff] .diff-add").count() > 0
    sha = page.inner_text("[data-testid=patch-sha]").strip()
    job = EvolutionJob.objects.get(project=project)
    assert sha == job.best_iteration.patch_sha256
    reviewer_layout_check(page)  # 1280×800: the decision, then the diff within two screens, the rest folded
    check("evolution-job-awaiting-consent")

    dialogs: list[str] = []  # approve asks first, naming the patch
    page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    page.click("[data-testid=approve]")
    page.wait_for_selector("[data-testid=pr-branch]", timeout=120_000)
    assert page.inner_text("[data-testid=pr-branch]") == f"evo/{job.pk}/1"
    assert "PR_OPENED" in page.inner_text("[data-testid=job-state]")
    assert len(dialogs) == 1 and sha in dialogs[0], dialogs
    check("evolution-job-pr-opened")
    page.goto(base + "/")
    assert page.locator(f"[data-testid=job-table] tr[data-job='{job.pk}']").count() == 1
    check("evolution-jobs")
    page.goto(base + "/releases/")
    check("evolution-releases")
    assert not errors, errors
    check.assert_clean()



def _wait_for_verdict(page, project, worker, *, timeout: float) -> None:
    """Until the job page shows PROMOTE_ELIGIBLE."""
    from tests.frontend.support import job_wait

    selector = "[data-testid=verdict-decision]:has-text('PROMOTE_ELIGIBLE')"
    job_wait(page, worker, job_of=lambda: EvolutionJob.objects.filter(project=project).first(),
             reached=lambda job: page.locator(selector).count() > 0, timeout=timeout, what="PROMOTE_ELIGIBLE")


def _wait(predicate, *, timeout: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.browser
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_issue_11_acceptance_evolve_hot_swap_and_the_next_release_fixes_the_insight(
        live_server, page, celery_worker, worker_evolution_dir, project, owner, issued_key, settings, tmp_path,
        axe_path):
    """The example agent's mediator_race insight (found by a real diagnosis of its v2 traces, sent over OTLP/HTTP):
    Evolve in the browser with the scripted fixture and hot swap, follow the job through a real worker to
    PROMOTE_ELIGIBLE, approve, see the release become current; then the agent's v3 without the bug, diagnosed,
    marks the insight fixed and closes its ticket."""
    import subprocess
    import sys

    from diagnosis.services.rubrics import rubric_create_demo_set
    from diagnosis.tickets.models import Ticket as TicketModel
    from evolution.deploy import hot_swap_config_validate, release_current_get
    from evolution.models import InsightFix
    from evolution.services import evolution_target_add
    from examples.support_desk.target_repo import target_repo_make
    from tests.diagnosis.insights.conftest import TOUCHED_BY, diagnose, insight_for_tasks
    from tests.frontend.support import axe_violations, describe, login
    from tests.support.browser import screenshot
    from traces.models import Trace

    repo_root = Path(__file__).resolve().parents[2]
    settings.CLEAR_JUDGE_MODEL = ""
    rubric_create_demo_set(project=project)

    def send(release: str, bugs: str):
        result = subprocess.run([sys.executable, "-m", "examples.support_desk", "run", "--bugs", bugs, "--release",
                                 release, "--endpoint", live_server.url, "--key", issued_key.secret], cwd=repo_root,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        traces = Trace.objects.filter(project=project, release=release)
        _wait(lambda: traces.count() == 22 and not traces.filter(finalized_at=None).exists(), timeout=120,
              what=f"the worker to finalize {release}'s traces")
        return diagnose(project, release)

    race = insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"], send("v2", "mediator_race,retry_loop"))
    target_repo_make(dest=tmp_path / "desk")
    target = evolution_target_add(operator=True, project=project, name="support_desk", source=str(tmp_path / "desk"),
                                  config=None)  # its evolution.json: trials 2, hot_swap with `serve`
    assert target.config.get("hot_swap"), target.config
    root = evolution_target_releases_root(target=target)

    problems: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def check(name: str) -> None:
        assert page.title().endswith("· Clear"), page.title()
        violations = axe_violations(page, axe_path)
        screenshot(page, name)
        if violations:
            problems.append(f"{name}:\n{describe(violations)}")

    login(page, live_server.url)
    try:
        page.goto(f"{live_server.url}/p/{project.slug}/insights/{race.pk}/")
        page.click("[data-testid=evolve]")
        page.wait_for_selector("[data-testid=evolve-form]")
        page.select_option("#id_mode", "hot_swap")
        assert page.input_value("#id_script").endswith("mediator_race_fix.json")
        page.click("[data-testid=evolve-submit]")
        _wait_for_verdict(page, project, celery_worker, timeout=600)
        job = EvolutionJob.objects.get(project=project)
        assert "hot-swap" in page.inner_text("[data-testid=approve]")
        check("evolution-acceptance-awaiting-consent")
        dialogs: list[str] = []  # approve asks first, naming the patch
        page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
        page.click("[data-testid=approve]")
        page.wait_for_selector("[data-testid=job-state]:has-text('PROMOTED')", timeout=300_000)
        job.refresh_from_db()
        assert (job.state, job.terminal_reason) == ("PROMOTED", "healthy"), job.error
        assert len(dialogs) == 1 and "hot-swap" in dialogs[0] and job.best_iteration.patch_sha256 in dialogs[0]
        release = f"job-{job.pk}-{job.best_iteration.candidate_commit[:12]}"
        assert release in page.inner_text("[data-testid=insight-fix]")
        check("evolution-acceptance-promoted")
        page.goto(f"{live_server.url}/p/{project.slug}/evolution/releases/")
        assert page.inner_text(f"[data-target='{target.pk}'] [data-testid=current-release]") == release
        assert release_current_get(releases_root=root) == release
        check("evolution-acceptance-releases")
    finally:
        hot_swap_config_validate(target.config["hot_swap"]).build(releases_root=root).activator.stop()

    # The agent's next release, without the bug: diagnosed, the insight is fixed and its ticket closed.
    send("v3", "retry_loop")
    _wait(lambda: InsightFix.objects.filter(job=job, status="fixed").exists(), timeout=120,
          what="the worker's fix check after v3's insights build")
    race.refresh_from_db()
    assert race.status == "fixed" and TicketModel.objects.get(insight=race).status == "fixed"
    page.goto(f"{live_server.url}/p/{project.slug}/evolution/jobs/{job.pk}/")
    assert "the insight is fixed" in page.inner_text("[data-testid=insight-fix]")
    page.goto(f"{live_server.url}/p/{project.slug}/insights/{race.pk}/")
    check("evolution-acceptance-insight-fixed")
    assert not errors, errors
    assert not problems, "\n".join(problems)
