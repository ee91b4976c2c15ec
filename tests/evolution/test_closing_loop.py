"""Closing the loop (issue #11 item 4) with the example agent: its suite goes to a live Clear over OTLP/HTTP and is
diagnosed with the demo's rule judges and BUGS.md rubrics (no LLM). A scripted job fixes mediator_race and is
promoted by hot swap; the agent's next release, run without the bug, marks the insight fixed and closes its ticket;
a later release with the bug back reopens both."""

import subprocess
import sys
from pathlib import Path

import pytest

from diagnosis.services.rubrics import rubric_create_demo_set
from diagnosis.models import InsightEvent
from diagnosis.tickets.models import Ticket
from evolution.deploy import hot_swap_config_validate, release_current_get
from evolution.models import EvolutionJob, InsightFix
from evolution.services import evolution_job_consent, evolution_job_start, evolution_target_add
from evolution.services.api_actions import evolution_job_create
from evolution.services.hot_swap import releases_root
from evolution.services.jobs import JobStateError
from evolution.services.watch import evolution_job_mark_merged, insight_fixes_check
from examples.support_desk.target_repo import EVOLUTION_CONFIG, target_repo_make
from tests.diagnosis.insights.conftest import TOUCHED_BY, diagnose, insight_for_tasks
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "examples" / "support_desk" / "evolution"
# Fast through the config; the shipped evolution.json keeps the defaults (5 s, 90 s, 3 passes).
FAST_HOT_SWAP = {**EVOLUTION_CONFIG["hot_swap"], "health": {"interval_s": 0.2, "window_s": 15, "passes_required": 2}}


def _send_suite(url: str, key: str, release: str, bugs: str) -> None:
    result = subprocess.run([sys.executable, "-m", "examples.support_desk", "run", "--bugs", bugs, "--release",
                             release, "--endpoint", url, "--key", key], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "exported" in result.stdout, result.stdout + result.stderr


@pytest.fixture
def desk(live_server, project, issued_key, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    rubric_create_demo_set(project=project)

    def send(release: str, bugs: str):
        _send_suite(live_server.url, issued_key.secret, release, bugs)
        assert Trace.objects.filter(project=project, release=release).count() == 22
        return diagnose(project, release)

    return send


def _ticket(insight):
    return Ticket.objects.get(insight=insight)


def test_a_promoted_fix_is_confirmed_by_the_next_release_and_reopened_when_the_bug_comes_back(
        desk, project, owner, tmp_path):
    run_v2 = desk("v2", "mediator_race,retry_loop")
    race = insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"], run_v2)
    assert (race.status, _ticket(race).status) == ("open", "open")

    target_repo_make(dest=tmp_path / "desk")
    target = evolution_target_add(operator=True, project=project, name="support-desk", source=str(tmp_path / "desk"),
                                  config={**EVOLUTION_CONFIG, "hot_swap": FAST_HOT_SWAP})
    root = releases_root(target=target)
    try:
        job = evolution_job_create(project=project, target=target, insight=race, backend_name="scripted",
                                   backend_config={"script_path": str(FIXTURES / "mediator_race_fix.json")},
                                   depth="shallow", mode="hot_swap")
        job.refresh_from_db()
        assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
        evolution_job_consent(job=job, user=owner, patch_sha256=job.best_iteration.patch_sha256)
        job.refresh_from_db()
        assert (job.state, job.terminal_reason) == ("PROMOTED", "healthy"), job.error
        release = f"job-{job.pk}-{job.best_iteration.candidate_commit[:12]}"
        assert release_current_get(releases_root=root) == release
        assert (root / "heartbeat" / "beat").exists()  # `serve` is running from the new release
    finally:
        hot_swap_config_validate(FAST_HOT_SWAP).build(releases_root=root).activator.stop()
    fix = InsightFix.objects.get(job=job)
    assert (fix.release, fix.status, fix.insight_id) == (release, "watching", race.pk)

    # The release after the promotion, without the bug: the insight is gone from its 22 judged traces.
    run_v3 = desk("v3", "retry_loop")
    fix.refresh_from_db()
    race.refresh_from_db()
    assert (fix.status, fix.fixed_run_id) == ("fixed", run_v3.pk)
    assert fix.evidence == {"run": str(run_v3.pk), "releases": ["v3"], "judged": 22, "affected": 0, "frequency": 0.0,
                            "below": 0.02, "min_judged": 20}
    assert race.status == "fixed" and _ticket(race).status == "fixed"
    note = InsightEvent.objects.filter(insight=race, kind="status").latest("pk").data["note"]
    assert f"fixed by evolution job {job.pk}: 0/22 judged traces of release(s) v3" in note
    # The fix is about mediator_race only: the retry loop, still in v3, stays open.
    retry = insight_for_tasks(project, "billing_worker", TOUCHED_BY["retry_loop"], run_v3)
    assert retry.status == "open"

    # The bug comes back: the build reopens the insight, its ticket follows, the fix is recorded as reopened.
    run_v4 = desk("v4", "mediator_race")
    fix.refresh_from_db()
    race.refresh_from_db()
    assert race.status == "open" and race.reopen_count == 1 and _ticket(race).status == "open"
    assert (fix.status, fix.reopened_run_id) == ("reopened", run_v4.pk)


def test_a_merged_pull_request_is_watched_under_the_release_named(desk, project, owner, tmp_path):
    run_v2 = desk("v2", "mediator_race")
    race = insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"], run_v2)
    target_repo_make(dest=tmp_path / "desk")
    target = evolution_target_add(operator=True, project=project, name="support-desk", source=str(tmp_path / "desk"))
    job = evolution_job_start(project=project, target=target, insight=race, backend_name="scripted",
                              backend_config={"script": {"entries": []}}, enqueue=False)
    with pytest.raises(JobStateError, match="only a job whose PR was opened"):
        evolution_job_mark_merged(job=job, user=owner, release="v3")
    # A PR job's end state (the PR path itself is tested in test_scenarios); the merge happens outside Clear.
    EvolutionJob.objects.filter(pk=job.pk).update(state="PR_OPENED", terminal_reason="pr_opened")
    job.refresh_from_db()
    with pytest.raises(JobStateError, match="name the release"):
        evolution_job_mark_merged(job=job, user=owner, release=" ")
    fix = evolution_job_mark_merged(job=job, user=owner, release="v3")
    assert job.events.filter(event="merged").get().data["release"] == "v3"

    # v2 again (received before the merge, and not the release named) does not count.
    assert insight_fixes_check(run_id=diagnose(project, "v2").pk) == []
    fix.refresh_from_db()
    assert fix.status == "watching"
    desk("v3", "none")
    fix.refresh_from_db()
    race.refresh_from_db()
    assert fix.status == "fixed" and race.status == "fixed" and _ticket(race).status == "fixed"
