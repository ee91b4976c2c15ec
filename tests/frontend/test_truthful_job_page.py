"""Issue 26, items 1 and 6: an evolution job's page says what is true. After its release was rolled back, a PROMOTED
job is not headed "the fix is live" nor says its release "carries the fix: watching", on its page and in the lists;
the trials' summary counts tasks, not task × seed rows, and says how many of the other tasks ran unchanged and how
many did not run."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.utils import timezone

from evolution.models import (
    EvolutionJob, EvolutionTarget, InsightFix, Iteration, Release, TaskSpec, TrialRun, Verdict,
)
from evolution.services.hot_swap import releases_undone_mark
from tests.evolution.fixture_repo import CONFIG
from tests.evolution.support import insight_for_traces
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db


def _url(project, tail: str) -> str:
    return f"/p/{project.slug}/evolution/{tail}"


def _text(html: str) -> str:
    """The page's visible words, tags dropped, whitespace folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


class _Element(HTMLParser):
    """The text of the first element with a data-testid, nested elements included."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "wbr", "source"}

    def __init__(self, testid: str):
        super().__init__()
        self.testid, self.depth, self.parts, self.found = testid, 0, [], False

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        if self.depth:
            self.depth += 1
        elif not self.found and dict(attrs).get("data-testid") == self.testid:
            self.depth, self.found = 1, True

    def handle_endtag(self, tag):
        if self.depth and tag not in self.VOID:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.parts.append(data)


def _section(html: str, testid: str) -> str:
    parser = _Element(testid)
    parser.feed(html)
    assert parser.found, f"no {testid} on the page"
    return re.sub(r"\s+", " ", "".join(parser.parts)).strip()


def _promoted_job(project, target, insight, *, n: int) -> tuple[EvolutionJob, Release]:
    job = EvolutionJob.objects.create(project=project, target=target, insight=insight, backend_name="scripted",
                                      state="PROMOTED", terminal_reason="healthy", finished_at=timezone.now(),
                                      config_snapshot={"mode": "hot_swap"})
    release = Release.objects.create(target=target, job=job, release_id=f"job-{job.pk}-{n:012d}",
                                     path=f"/releases/job-{job.pk}", status=Release.Status.ACTIVE,
                                     activated_at=timezone.now())
    InsightFix.objects.create(project=project, insight=insight, job=job, release=f"v{n}", commit="b" * 40,
                              promoted_at=timezone.now())
    return job, release


def test_a_rolled_back_release_is_not_shown_as_a_live_fix(project, owner):
    client = client_for(owner)
    insight = insight_for_traces(project=project, traces=[], title="Refund requests are routed to billing")
    target = EvolutionTarget.objects.create(project=project, name="desk", source="/x", config=CONFIG)
    Release.objects.create(target=target, release_id="release-0-aaaaaaaaaaaa", path="/releases/zero",
                           status=Release.Status.SUPERSEDED)
    rolled, _ = _promoted_job(project, target, insight, n=3)
    live_target = EvolutionTarget.objects.create(project=project, name="other", source="/y", config=CONFIG)
    live, _ = _promoted_job(project, live_target, insight, n=4)

    # Before the rollback both jobs' fixes are live, and the page says so.
    before = client.get(_url(project, f"jobs/{rolled.pk}/")).content.decode()
    assert "the fix is live" in _section(before, "job-state")
    assert "carries the fix" in _section(before, "insight-fix")

    # The rollback as the release history records it: the release swapped in after release zero is undone.
    assert releases_undone_mark(target=target, to_release="release-0-aaaaaaaaaaaa", by="alice") == [
        f"job-{rolled.pk}-000000000003"]
    assert InsightFix.objects.get(job=rolled).status == InsightFix.Status.ROLLED_BACK

    html = client.get(_url(project, f"jobs/{rolled.pk}/")).content.decode()
    text = _text(html)
    head = _section(html, "job-state")
    assert "the fix is live" not in text, head
    assert "release rolled back" in head and "no longer live" in head, head
    assert 'class="pill ok">PROMOTED' not in html  # never shown as a success
    fix = _section(html, "insight-fix")
    assert "carries the fix" not in fix and "watching" not in fix, fix
    assert "rolled back" in fix and "no longer live" in fix, fix
    assert "no longer live" in _section(html, "job-base")
    # The reason the job ended with was the promotion's: the page says it no longer holds.
    assert re.search(r"reason <code>healthy</code> <span[^>]*>\(when it was promoted; its release was rolled back "
                     r"since\)", html), head

    # The jobs list and the target's page say the same of the rolled-back job, and the live one stays live.
    jobs = client.get(_url(project, "")).content.decode()
    row = re.search(rf'<tr data-job="{rolled.pk}">(.*?)</tr>', jobs, re.S).group(1)
    assert "release rolled back" in row and 'class="pill ok"' not in row, row
    other = re.search(rf'<tr data-job="{live.pk}">(.*?)</tr>', jobs, re.S).group(1)
    assert 'class="pill ok">PROMOTED' in other and "rolled back" not in other, other
    target_page = client.get(_url(project, f"targets/{target.pk}/")).content.decode()
    assert "release rolled back" in target_page and 'class="pill ok">PROMOTED' not in target_page
    still_live = client.get(_url(project, f"jobs/{live.pk}/")).content.decode()
    assert "the fix is live" in _section(still_live, "job-state")
    assert "carries the fix" in _section(still_live, "insight-fix")
    assert "rolled back since" not in still_live


def _trials(job, task, *, arm: str, passed: bool, iteration=None) -> None:
    for trial in range(3):
        TrialRun.objects.create(job=job, iteration=iteration, iteration_n=iteration.n if iteration else 0, task=task,
                                arm=arm, trial_n=trial, seed=task.seed, score=1.0 if passed else 0.0, passed=passed,
                                isolation_level="subprocess")


def _job_with_trials(project, *, regressions_run: int) -> EvolutionJob:
    """The demo's job: 4 target tasks at 2 seeds each, failing at baseline and passing with the candidate; 18
    regression tasks at one seed, passing before and after (the first `regressions_run` of them ran)."""
    insight = insight_for_traces(project=project, traces=[], title="The mediator drops facts")
    target = EvolutionTarget.objects.create(project=project, name=f"desk {regressions_run}", source="/x",
                                            config=CONFIG)
    job = EvolutionJob.objects.create(project=project, target=target, insight=insight, backend_name="scripted",
                                      state="AWAITING_CONSENT")
    it = Iteration.objects.create(job=job, n=1, base_commit="a" * 40, candidate_commit="b" * 40,
                                  patch_sha256="c" * 64, status="evaluated", verdict="PROMOTE_ELIGIBLE")
    Verdict.objects.create(iteration=it, decision="PROMOTE_ELIGIBLE", summary="PROMOTE_ELIGIBLE: 8/8 fixed")
    EvolutionJob.objects.filter(pk=job.pk).update(best_iteration=it)
    for name in ("order_status", "refund_policy", "tracking", "invoice_copy"):
        for seed in (0, 1):
            task = TaskSpec.objects.create(job=job, kind="target", source="insight_trace", task_id=name, seed=seed,
                                           trials=3, timeout_s=60, reproduces=True)
            _trials(job, task, arm="baseline", passed=False)
            _trials(job, task, arm="candidate", passed=True, iteration=it)
    for i in range(18):
        task = TaskSpec.objects.create(job=job, kind="regression", source="suite", task_id=f"suite_{i:02d}", seed=0,
                                       trials=3, timeout_s=60)
        _trials(job, task, arm="baseline", passed=True)
        if i < regressions_run:
            _trials(job, task, arm="candidate", passed=True, iteration=it)
    return job


def test_the_trials_summary_counts_tasks_and_says_which_ran(project, owner):
    client = client_for(owner)
    job = _job_with_trials(project, regressions_run=18)
    html = client.get(_url(project, f"jobs/{job.pk}/")).content.decode()
    summary = _section(html, "verdict-summary")
    # 4 tasks, each failing at both its seeds: 4 tasks fixed, the 8 task × seed rows said apart.
    assert "It fixes 4 of the 4 failing tasks (8 of their 8 failing seeds; mean score +1.00)" in summary, summary
    assert "none of the 18 other tasks got worse" in summary, summary
    folded = _section(html, "tasks-same-summary")
    assert folded == "18 other tasks ran, none changed", folded
    assert "unchanged or not run" not in html

    # Some regression tasks were not run (the cascade): said apart from those that ran.
    partial = client.get(_url(project, f"jobs/{_job_with_trials(project, regressions_run=16).pk}/")).content.decode()
    assert _section(partial, "tasks-same-summary") == "16 other tasks ran, none changed; 2 more tasks were not run"
    assert "none of the 16 other tasks that ran (2 not run) got worse" in _section(partial, "verdict-summary")
