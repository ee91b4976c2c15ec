"""The end-to-end scenarios of evolution.md §7.14 (all but the health check, which is part 2): the scripted backend,
the fixture router repository, the sandbox, eager Celery with the chain sent on commit."""

import hashlib
import json
import subprocess

import pytest

from evolution.models import Artifact, AuditEvent, EvolutionJob, Iteration, StageRun, TaskSpec, TrialRun
from evolution.services import evolution_job_consent, evolution_job_start, job_transition
from evolution.services.stages import stage_execute
from evolution.services.workspace import artifact_read, job_paths
from tests.evolution.fixture_repo import (
    CONFIG, FIXED_BRANCH, PARTIAL_BRANCH, REGRESSING_BRANCH, REGRESSION_TASKS, TARGET_TASKS, replace_edit,
)
from tests.evolution.support import (
    APPROVE_CODE, DONE, LOCATOR_OUTPUT, PLAN_OUTPUT, happy_entries, prompts, script_write,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_job(project, owner, router_target, refund_insight, tmp_path, django_capture_on_commit_callbacks):
    def run(entries, *, depth="standard", policy=None, defaults=None):
        script = script_write(tmp_path / "script.json", entries, defaults)
        with django_capture_on_commit_callbacks(execute=True):
            job = evolution_job_start(project=project, target=router_target, insight=refund_insight,
                                      backend_name="scripted", backend_config={"script_path": str(script)},
                                      depth=depth, created_by=owner, policy_overrides=policy)
        job.refresh_from_db()
        return job

    return run


def _path(job):
    return [e.to_state for e in AuditEvent.objects.filter(job=job).exclude(to_state="").order_by("pk")
            if e.event not in ("created",)]


def _branches(remote):
    out = subprocess.run(["git", "--git-dir", str(remote), "for-each-ref", "--format=%(refname:short)",
                          "refs/heads/"], capture_output=True, text=True, check=True).stdout
    return out.split()


@pytest.mark.django_db(transaction=True)
def test_a_stage_that_moves_the_job_is_closed_in_the_same_commit(project, owner, router_target, refund_insight,
                                                                  tmp_path, monkeypatch):
    """A reader (the job page, a test polling a real worker) never sees the job in its next state while the stage
    that moved it still says "running". Real commits here, as in a worker: each hook runs when its commit lands."""
    from django.db import transaction

    from evolution.services import stages

    running_at_commit = []
    real_transition = stages.job_transition

    def transition_and_look_after_commit(**kwargs):
        job = real_transition(**kwargs)
        transaction.on_commit(lambda: running_at_commit.append(
            (job.state, list(StageRun.objects.filter(job_id=job.pk, status="running").values_list("stage", flat=True)))))
        return job

    monkeypatch.setattr(stages, "job_transition", transition_and_look_after_commit)
    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    job = evolution_job_start(project=project, target=router_target, insight=refund_insight, backend_name="scripted",
                              backend_config={"script_path": str(script)}, created_by=owner,
                              policy_overrides={"trials": 1})
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    assert [(state, running) for state, running in running_at_commit if running] == []
    assert running_at_commit[-1] == ("AWAITING_CONSENT", [])


@pytest.mark.django_db(transaction=True)
def test_a_verdict_lands_with_the_move_out_of_verdict(project, owner, router_target, refund_insight, tmp_path,
                                                      monkeypatch):
    """The job page never shows a decision while the job still says VERDICT: the verdict row and the move are one
    commit (a fresh-clone CI run saw PROMOTE_ELIGIBLE under 'VERDICT scoring the trials')."""
    from django.db import transaction

    from evolution.models import Verdict
    from evolution.services import stages_eval

    state_when_verdict_landed = []
    real_update_or_create = Verdict.objects.update_or_create

    def verdict_and_look_after_commit(**kwargs):
        row, created = real_update_or_create(**kwargs)
        transaction.on_commit(lambda: state_when_verdict_landed.append(
            EvolutionJob.objects.get(pk=row.iteration.job_id).state))
        return row, created

    monkeypatch.setattr(stages_eval.Verdict.objects, "update_or_create", verdict_and_look_after_commit)
    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    job = evolution_job_start(project=project, target=router_target, insight=refund_insight, backend_name="scripted",
                              backend_config={"script_path": str(script)}, created_by=owner,
                              policy_overrides={"trials": 1})
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    assert state_when_verdict_landed == ["AWAITING_CONSENT"]


def test_happy_path_to_a_pull_request_branch(run_job, owner, router_remote, django_capture_on_commit_callbacks):
    job = run_job(happy_entries(replace_edit(FIXED_BRANCH)), policy={"trials": 2})
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    assert _path(job) == ["PREPARING", "BASELINE", "LOCATING", "PLANNING", "PLAN_REVIEW", "IMPLEMENTING",
                          "CODE_REVIEW", "CHECKING", "TRIALS", "VERDICT", "AWAITING_CONSENT"]
    tasks = {t.task_id: t for t in TaskSpec.objects.filter(job=job)}
    assert {k for k, t in tasks.items() if t.kind == "target"} == set(TARGET_TASKS)
    assert {k for k, t in tasks.items() if t.kind == "regression"} == set(REGRESSION_TASKS)
    assert all(tasks[t].seed == 7 and tasks[t].reproduces for t in TARGET_TASKS)
    best = job.best_iteration
    assert best.n == 1 and best.verdict == "PROMOTE_ELIGIBLE" and best.score == 1.0
    # Paired arms: the same tasks, trial indexes and seeds on both sides; every run records its isolation.
    runs = TrialRun.objects.filter(job=job)
    base = {(r.task_id, r.trial_n, r.seed) for r in runs.filter(arm="baseline")}
    cand = {(r.task_id, r.trial_n, r.seed) for r in runs.filter(arm="candidate")}
    assert base == cand and len(base) == 6 * 2
    assert {r.isolation_level for r in runs} == {job.sandbox_level}
    stages = {s.stage: s for s in StageRun.objects.filter(job=job)}
    assert {stages[s].isolation_level for s in ("prepare", "baseline", "check", "trials")} == {job.sandbox_level}
    assert stages["implement"].backend == "scripted" and stages["implement"].session_id
    assert not any(r.passed for r in runs.filter(arm="baseline", task__kind="target"))
    assert all(r.passed for r in runs.filter(arm="candidate"))
    verdict = best.verdict_record
    assert verdict.grader_commit == job.base_commit and all(rule["passed"] for rule in verdict.rules)
    patch = artifact_read(artifact=Artifact.objects.get(job=job, kind="patch")).decode()
    assert '+        return "refunds"' in patch and "grading" not in patch
    assert StageRun.objects.get(job=job, stage="locate").tree_hash_before == \
        StageRun.objects.get(job=job, stage="locate").tree_hash_after != ""

    with django_capture_on_commit_callbacks(execute=True):
        evolution_job_consent(job=job, user=owner, patch_sha256=best.patch_sha256)
    job.refresh_from_db()
    assert job.state == "PR_OPENED", (job.terminal_reason, job.error)
    assert job.consent_by == owner and job.consent_patch_sha256 == best.patch_sha256
    branch = f"evo/{job.pk}/1"
    assert job.pr_branch == branch and branch in _branches(router_remote)
    tip = subprocess.run(["git", "--git-dir", str(router_remote), "rev-parse", branch], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert tip == best.candidate_commit
    assert not job_paths(job_id=job.pk).worktree.exists()  # the job's worktree is gone once it ended


def test_consent_and_promotion_both_check_the_patch_hash(run_job, owner, router_remote):
    job = run_job(happy_entries(replace_edit(FIXED_BRANCH)), policy={"trials": 1})
    with pytest.raises(Exception, match="not the candidate's"):
        evolution_job_consent(job=job, user=owner, patch_sha256="0" * 64)
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT"
    # Consent recorded for another patch than the one promote finds (say the row was tampered with): no push.
    job_transition(job_id=job.pk, from_states=["AWAITING_CONSENT"], to_state="PROMOTING", actor="test",
                   event="consented", consent_by=owner, consent_patch_sha256="1" * 64)
    assert stage_execute(job_id=job.pk, stage="promote") == "patch_changed"
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("FAILED", "patch_changed")
    assert [b for b in _branches(router_remote) if b.startswith("evo/")] == []


def test_the_grader_comes_from_the_base_commit_even_when_the_candidate_may_edit_it(
        project, router_remote, refund_insight, tmp_path, django_capture_on_commit_callbacks):
    from evolution.services import evolution_target_add

    target = evolution_target_add(operator=True, project=project, name="router-open", source=str(router_remote),
                                  config={**CONFIG, "editable_paths": ["router/**", "grading/**"], "denied_paths": []})
    cheat = {"path": "grading/grade.py", "write": "print('{\"score\": 1.0, \"passed\": true}')\n"}
    script = script_write(tmp_path / "cheat.json", happy_entries(cheat))
    with django_capture_on_commit_callbacks(execute=True):
        job = evolution_job_start(project=project, target=target, insight=refund_insight, backend_name="scripted",
                                  backend_config={"script_path": str(script)},
                                  policy_overrides={"trials": 1, "max_iterations": 1})
    job.refresh_from_db()
    assert (job.state, job.terminal_reason) == ("NO_IMPROVEMENT", "no_improvement"), job.error
    assert not any(r.passed for r in TrialRun.objects.filter(job=job, arm="candidate", task__kind="target"))


def test_targets_of_earlier_promoted_fixes_become_regressions(project, router_remote, refund_insight, owner):
    from evolution.services import evolution_target_add
    from evolution.services.trials import job_tasks_snapshot
    from tests.evolution.support import failing_traces_ingest, insight_for_traces

    target = evolution_target_add(operator=True, project=project, name="router-nosuite", source=str(router_remote),
                                  config={**CONFIG, "suite_command": ""})
    first = evolution_job_start(project=project, target=target, insight=refund_insight, backend_name="scripted",
                                backend_config={"script": {"entries": []}}, enqueue=False)
    assert {t.task_id for t in job_tasks_snapshot(job=first)} == set(TARGET_TASKS)
    job_transition(job_id=first.pk, from_states=["QUEUED"], to_state="CANCELLED", actor="test", event="x")
    traces = failing_traces_ingest(project=project, tasks=[("where-is-order", 3)])
    shipping = insight_for_traces(project=project, traces=traces, title="Late packages go to general")
    second = evolution_job_start(project=project, target=target, insight=shipping, backend_name="scripted",
                                 backend_config={"script": {"entries": []}}, enqueue=False)
    kinds = {(t.task_id, t.kind, t.source) for t in job_tasks_snapshot(job=second)}
    assert kinds == {("where-is-order", "target", "insight_trace")}  # the first job was not promoted
    type(first).objects.filter(pk=first.pk).update(state="PR_OPENED")
    kinds = {(t.task_id, t.seed, t.kind, t.source) for t in job_tasks_snapshot(job=second)}
    assert kinds == {("where-is-order", 3, "target", "insight_trace"),
                     *{(task, 7, "regression", "promoted") for task in TARGET_TASKS}}


def _entries_with(role, *replacements, base=None):
    """The happy script with `role`'s entries replaced by the given ones."""
    entries = [e for e in (base or happy_entries(replace_edit(FIXED_BRANCH))) if e["role"] != role]
    return entries + list(replacements)


def test_plan_loop_passes_the_reviewers_feedback_to_the_next_round(run_job):
    reject = {"verdict": "REJECT_COMPLETENESS", "issues": [{"severity": "important", "dimension": "completeness",
              "detail": "The plan ignores the 'money back' phrasing", "required_change": "cover MONEY-BACK-7731"}]}
    entries = _entries_with(
        "plan_reviewer",
        {"role": "plan_reviewer", "iteration": 1, "round": 0, "output": reject},
        {"role": "plan_reviewer", "iteration": 1, "round": 1, "output": {"verdict": "APPROVE", "issues": []}},
    )
    job = run_job(entries, policy={"trials": 1})
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    planner = [p for p in prompts(job) if p["role"] == "planner"]
    assert [p["round"] for p in planner] == [0, 1]
    assert "MONEY-BACK-7731" not in planner[0]["user_input"]
    assert "MONEY-BACK-7731" in planner[1]["user_input"] and "rejected the previous plan" in planner[1]["user_input"]
    names = set(Artifact.objects.filter(job=job, kind__in=["plan", "plan_review"]).values_list("name", flat=True))
    assert names == {"plan-0.json", "plan-1.json", "plan_review-0.json", "plan_review-1.json"}
    outcomes = list(StageRun.objects.filter(job=job, stage="plan_review").order_by("round")
                    .values_list("round", "outcome"))
    assert outcomes == [(0, "REJECT_COMPLETENESS"), (1, "APPROVE")]


def test_code_loop_resets_the_worktree_between_rounds(run_job):
    bad = {"role": "implementer", "iteration": 1, "round": 0, "output": DONE,
           "edits": [replace_edit(FIXED_BRANCH), {"path": "router/retry.py", "write": "while True:\n    pass\n"}]}
    good = {"role": "implementer", "iteration": 1, "round": 1, "output": DONE, "edits": [replace_edit(FIXED_BRANCH)]}
    # The reviewer says APPROVE but lists a critical issue: the orchestrator re-derives the verdict from the issues.
    review0 = {"verdict": "APPROVE", "issues": [{"severity": "critical", "dimension": "side_effects",
                                                "file": "router/retry.py", "line": 1, "detail": "unbounded loop"}]}
    entries = _entries_with("code_reviewer",
                            {"role": "code_reviewer", "iteration": 1, "round": 0, "output": review0},
                            {"role": "code_reviewer", "iteration": 1, "round": 1, "output": APPROVE_CODE},
                            base=_entries_with("implementer", bad, good))
    job = run_job(entries, policy={"trials": 1})
    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    patches = {a.name: artifact_read(artifact=a).decode() for a in Artifact.objects.filter(job=job, kind="patch")}
    assert "router/retry.py" in patches["patch-0.diff"]
    best = job.best_iteration
    assert "router/retry.py" not in patches["patch-1.diff"] and '+        return "refunds"' in patches["patch-1.diff"]
    assert best.patch_sha256 == hashlib.sha256(patches["patch-1.diff"].encode()).hexdigest()
    implementer = [p for p in prompts(job) if p["role"] == "implementer"]
    assert "unbounded loop" in implementer[1]["user_input"]
    assert list(StageRun.objects.filter(job=job, stage="code_review").order_by("round")
                .values_list("outcome", flat=True)) == ["REJECT", "APPROVE"]


def test_a_fix_that_breaks_a_regression_task_is_rejected(run_job, router_remote):
    job = run_job(happy_entries(replace_edit(REGRESSING_BRANCH)), policy={"trials": 2})
    assert (job.state, job.terminal_reason) == ("REJECTED", "regression"), job.error
    it = Iteration.objects.get(job=job, n=1)
    assert it.verdict == "REJECT_REGRESSION" and it.score is None
    failed = {r["name"]: r for r in it.verdict_record.rules if not r["passed"]}
    assert "where-is-order" in failed["G2_per_task"]["detail"] and failed["G2_no_flips"]["value"] == ["where-is-order"]
    assert "G1_target_delta" not in failed  # the targets were fixed: it is the regression that rejects
    assert [b for b in _branches(router_remote) if b.startswith("evo/")] == []


def test_no_improvement_over_two_iterations_keeps_the_best_candidate(run_job):
    noop = {"path": "router/agent.py", "replace": {"old": '"""Routes a support message to a queue."""',
                                                   "new": '"""Routes a support message to a queue (v2)."""'}}
    entries = happy_entries(replace_edit(PARTIAL_BRANCH), iteration=1) + happy_entries(noop, iteration=2)
    job = run_job(entries, policy={"trials": 2, "max_iterations": 2})
    assert (job.state, job.terminal_reason) == ("NO_IMPROVEMENT", "budget_exhausted"), job.error
    first, second = Iteration.objects.filter(job=job).order_by("n")
    assert first.verdict == "NEED_MORE_WORK" and round(first.score, 3) == 0.333
    assert second.verdict == "NO_IMPROVEMENT" and second.score == 0.0
    assert job.best_iteration == first  # by score, not the most recent
    # The cascade: iteration 2's first trial of each target showed no gain, so nothing more of it ran.
    assert not TrialRun.objects.filter(iteration=second, task__kind="regression").exists()
    assert TrialRun.objects.filter(iteration=second, task__kind="target").count() == 3
    assert TrialRun.objects.filter(iteration=first, task__kind="regression").count() == 3 * 2
    assert TrialRun.objects.filter(iteration=first, task__kind="target").count() == 3 * 2
    locator = [p for p in prompts(job) if p["role"] == "locator"]
    assert "NEED_MORE_WORK" in locator[1]["user_input"]  # the next Locator hears how iteration 1 went


def test_a_denied_path_edit_fails_the_gates_and_never_reaches_trials(run_job):
    sneaky = {"role": "implementer", "iteration": "*", "round": "*", "output": DONE,
              "edits": [replace_edit(FIXED_BRANCH),
                        {"path": "grading/grade.py", "write": "print('{\"score\": 1, \"passed\": true}')\n"}]}
    job = run_job(_entries_with("implementer", sneaky), depth="shallow", policy={"max_iterations": 1})
    assert (job.state, job.terminal_reason) == ("REJECTED", "gates_failed"), job.error
    assert not TrialRun.objects.filter(job=job, arm="candidate").exists()
    report = artifact_read(artifact=Artifact.objects.get(job=job, kind="gate_report"))
    gates = {g["name"]: g for g in json.loads(report)}
    assert gates["paths"]["passed"] is False and gates["paths"]["offending"] == ["grading/grade.py"]
    assert "tests" not in gates  # no install/test run once a static gate failed


def test_a_read_only_role_that_writes_fails_the_job(run_job):
    entries = _entries_with("planner", {"role": "planner", "iteration": "*", "round": "*", "output": PLAN_OUTPUT,
                                        "violate_readonly": True})
    job = run_job(entries, policy={"trials": 1})
    assert (job.state, job.terminal_reason) == ("FAILED", "role_violated_readonly")
    stage = StageRun.objects.get(job=job, stage="plan")
    assert stage.outcome == "ROLE_VIOLATED_READONLY" and stage.tree_hash_before != stage.tree_hash_after
    assert not StageRun.objects.filter(job=job, stage="plan_review").exists()


def test_a_backend_crash_fails_the_job_with_the_reason(run_job):
    entries = _entries_with("locator", {"role": "locator", "iteration": "*", "round": "*", "crash": True,
                                        "output": LOCATOR_OUTPUT})
    job = run_job(entries, policy={"trials": 1})
    assert (job.state, job.terminal_reason) == ("FAILED", "backend_failed")
    assert "crashed on purpose" in job.error


HOT_SWAP = {"activator": {"kind": "process", "command": "python -c 'import time; time.sleep(600)'",
                          "stop_timeout_s": 5},
            "probes": [{"kind": "command", "command": "python health.py", "timeout_s": 10}, {"kind": "process_alive"}],
            "health": {"interval_s": 0.2, "window_s": 4, "passes_required": 2}, "keep_releases": 3}
HEALTH_BREAKING_BRANCH = FIXED_BRANCH + '''    if "hello" in text:
        return "billing"
'''


def test_hot_swap_promotes_a_healthy_release_and_rolls_an_unhealthy_one_back(
        project, owner, router_remote, refund_insight, tmp_path, django_capture_on_commit_callbacks, monkeypatch):
    """§7.14 scenarios 9 and 1 (hot-swap half): registering the target records its code as release zero, so even
    the first candidate, which passes every trial but fails its health check (no task says "hello"), has a release
    to go back to: `current` returns to release zero, whose re-probe passes. The next job, based on release zero
    again, is promoted."""
    from evolution.deploy import release_state_get
    from evolution.selectors import evolution_target_releases_root
    from evolution.services import evolution_target_add
    from evolution.services.api_actions import evolution_job_create

    from evolution import deploy

    promote_status_during_health_check = []
    real_promote = deploy.hot_swap_promote

    def promote_and_look(**kwargs):  # the swap and its health check, run by the promote stage
        promote_status_during_health_check.append(StageRun.objects.filter(stage="promote").latest("pk").status)
        return real_promote(**kwargs)

    monkeypatch.setattr(deploy, "hot_swap_promote", promote_and_look)
    target = evolution_target_add(operator=True, project=project, name="router-hot", source=str(router_remote),
                                  config={**CONFIG, "hot_swap": HOT_SWAP})
    root = evolution_target_releases_root(target=target)
    zero = (root / "current").resolve().name
    assert zero.startswith("release-0-") and release_state_get(releases_root=root).last_good == zero
    try:
        for n, branch in enumerate((HEALTH_BREAKING_BRANCH, FIXED_BRANCH)):
            script = script_write(tmp_path / f"hot-{n}.json", happy_entries(replace_edit(branch)))
            with django_capture_on_commit_callbacks(execute=True):
                job = evolution_job_create(project=project, target=target, insight=refund_insight,
                                           backend_name="scripted",  # the API's way: an inline script
                                           backend_config={"script": json.loads(script.read_text())},
                                           depth="shallow", mode="hot_swap")
            job.refresh_from_db()
            assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
            assert job.base_release.release_id == zero and job.base_commit == job.base_release.commit
            with django_capture_on_commit_callbacks(execute=True):
                evolution_job_consent(job=job, user=owner, patch_sha256=job.best_iteration.patch_sha256)
            job.refresh_from_db()
            release = f"job-{job.pk}-{job.best_iteration.candidate_commit[:12]}"
            # The promote stage runs on through the health check and the rollback: it closes with the job's end.
            assert promote_status_during_health_check.pop() == "running"
            ended = AuditEvent.objects.get(job=job, to_state=job.state).ts
            assert StageRun.objects.get(job=job, stage="promote").finished_at >= ended
            if n == 0:
                assert (job.state, job.terminal_reason) == ("ROLLED_BACK", "health_failed"), job.error
                assert _path(job)[-3:] == ["HEALTH_CHECK", "ROLLING_BACK", "ROLLED_BACK"]
                assert (root / "current").resolve().name == zero
                report = json.loads(artifact_read(artifact=Artifact.objects.get(job=job, kind="health_report")))
                assert report["rollback_to"] == zero and report["rollback_health"]["healthy"]
            else:
                assert (job.state, job.terminal_reason) == ("PROMOTED", "healthy"), job.error
                first = release
                assert (root / "current").resolve().name == first
        state = release_state_get(releases_root=root)
        assert state.last_good == first
        assert [b for b in _branches(router_remote) if b.startswith("evo/")] == []  # no PR in hot-swap mode
    finally:
        from evolution.deploy import hot_swap_config_validate

        hot_swap_config_validate(HOT_SWAP).build(releases_root=root).activator.stop()


def test_an_insight_whose_failures_do_not_reproduce_fails_the_job(
        project, router_target, tmp_path, django_capture_on_commit_callbacks):
    from tests.evolution.support import failing_traces_ingest, insight_for_traces

    def start(insight):
        with django_capture_on_commit_callbacks(execute=True):
            job = evolution_job_start(project=project, target=router_target, insight=insight,
                                      backend_name="scripted", backend_config={"script": {"entries": []}},
                                      policy_overrides={"trials": 1})
        job.refresh_from_db()
        return job

    passing = insight_for_traces(project=project, title="Invoices", traces=failing_traces_ingest(
        project=project, tasks=[("invoice-copy", 0), ("password-reset", 0)]))
    job = start(passing)
    assert (job.state, job.terminal_reason) == ("FAILED", "not_reproducible")
    assert set(TaskSpec.objects.filter(job=job, reproduces=False).values_list("task_id", flat=True)) == {
        "invoice-copy", "password-reset"}
    succeeded = insight_for_traces(project=project, title="Nothing failed", traces=failing_traces_ingest(
        project=project, tasks=[("refund-return", 1)], outcome="success"))
    job = start(succeeded)
    assert (job.state, job.terminal_reason) == ("FAILED", "prepare:no_target_tasks")
    assert "no failing traces with a task id" in job.error
