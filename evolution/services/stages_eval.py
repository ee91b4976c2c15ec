"""The orchestrator's own stages: prepare, baseline, trials, verdict, promote (PR mode)."""

from __future__ import annotations

import hashlib

from django.db import transaction

from evolution import git
from evolution.errors import EvolutionError, SandboxUnavailable
from evolution.models import EvolutionJob, Iteration, JobState, StageRun, TaskSpec, TrialRun, Verdict
from evolution.sandbox import sandbox_levels_allowed, sandbox_min_level, sandbox_runner_get
from evolution.services.gates import failed_tests
from evolution.services.loop import best_iteration, iteration_current, iteration_end, iteration_start
from evolution.services.stages import advance, finish
from evolution.services.trials import StopRequested, command_run, job_tasks_snapshot, trials_run
from evolution.services.verdict import (
    NEED_MORE_WORK, NO_IMPROVEMENT, PROMOTE_ELIGIBLE, REJECT_REGRESSION, cascade_continue, results_from_trials,
    verdict_compute,
)
from evolution.services.workspace import StopGuard, artifact_store, job_paths, job_workspace_prepare, mirror_path

S = JobState


def sandbox_level_choose(*, levels: list[str]) -> str:
    """The first of the target's allowed levels that works here and meets CLEAR_EVOLUTION_MIN_SANDBOX.

    Called before anything of the target runs: a target whose levels all fall below the minimum (registered before
    the minimum was raised, or by the operator) ends its job here, saying so.
    """
    allowed = sandbox_levels_allowed(levels=levels)
    if not allowed:
        raise SandboxUnavailable(
            f"The target allows only the sandbox level(s) {', '.join(levels)}, below this server's minimum "
            f"{sandbox_min_level()} (CLEAR_EVOLUTION_MIN_SANDBOX): candidate code never runs less contained. Add "
            f"{sandbox_min_level()} to the target's sandbox_levels, or have the operator lower the minimum.",
            code="sandbox_below_minimum")
    problems = []
    for level in allowed:
        try:
            return str(sandbox_runner_get(level=level).level)
        except SandboxUnavailable as exc:
            problems.append(exc.message)
    raise SandboxUnavailable("None of the target's sandbox_levels can run here: " + " | ".join(problems))


def prepare(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    guard = StopGuard(job_id=job.pk)
    job.sandbox_level = sandbox_level_choose(levels=job.target_config["sandbox_levels"])
    job.base_commit = job_workspace_prepare(job=job)
    EvolutionJob.objects.filter(pk=job.pk).update(sandbox_level=job.sandbox_level, base_commit=job.base_commit)
    stage_run.isolation_level = job.sandbox_level
    stage_run.save(update_fields=["isolation_level"])
    tasks = job_tasks_snapshot(job=job, should_stop=guard)
    artifact_store(job=job, stage_run=stage_run, kind="tasks", name="tasks.json",
                   content=[{"task_id": t.task_id, "seed": t.seed, "kind": t.kind, "source": t.source,
                             "trace_id": t.trace_id} for t in tasks])
    config = job.target_config
    worktree = job_paths(job_id=job.pk).worktree
    report = {"exit_code": 0, "failures": [], "output": "", "ran": False}
    timeout = job.policy["check_timeout_s"]
    if config.get("install_command"):
        proc = command_run(job=job, template=config["install_command"], workdir=worktree, timeout_s=timeout,
                           should_stop=guard)
        if not proc.ok:
            raise EvolutionError(f"install_command fails on the base commit (exit {proc.exit_code}): "
                                 f"{(proc.stderr or proc.stdout)[-800:]}", code="baseline_install_failed")
    if config.get("test_command"):
        proc = command_run(job=job, template=config["test_command"], workdir=worktree, timeout_s=timeout,
                           should_stop=guard)
        if proc.cancelled:
            raise StopRequested()
        report = {"exit_code": proc.exit_code, "failures": sorted(failed_tests(proc.stdout)), "ran": True,
                  "timed_out": proc.timed_out, "output": (proc.stdout + proc.stderr)[-20000:]}
    artifact_store(job=job, stage_run=stage_run, kind="baseline_test_report", name="baseline_tests.json",
                   content=report)
    advance(job=job, to_state=S.BASELINE, event="prepared", stage="baseline",
            data={"base_commit": job.base_commit, "sandbox_level": job.sandbox_level, "tasks": len(tasks)})


def baseline(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    tasks = list(job.tasks.all())
    runs = trials_run(job=job, arm=TrialRun.Arm.BASELINE, commit=job.base_commit, tasks=tasks, iteration=None,
                      should_stop=StopGuard(job_id=job.pk))
    passes: dict[int, list[bool]] = {}
    for run in runs:
        passes.setdefault(run.task_id, []).append(run.passed)
    reproducing = []
    for task in tasks:
        if task.kind != TaskSpec.Kind.TARGET:
            continue
        results = passes.get(task.pk, [])
        task.reproduces = not (2 * sum(results) > len(results))
        if not task.reproduces:
            # A target that already passes cannot show a fix; it is kept as a task the fix must not break.
            task.kind = TaskSpec.Kind.REGRESSION
        else:
            reproducing.append(task.task_id)
        task.save(update_fields=["reproduces", "kind"])
    if not reproducing:
        finish(job=job, to_state=S.FAILED, reason="not_reproducible",
               error="No target task fails at the base commit: the insight's failures do not reproduce")
        return "not_reproducible"
    iteration_start(job=job, n=1, event="baseline_done", data={"reproducing": reproducing})


def trials(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    guard = StopGuard(job_id=job.pk)
    targets = list(job.tasks.filter(kind=TaskSpec.Kind.TARGET))
    # The cascade of §7.9: one trial of each target; all n only if that improved on the baseline; then the
    # regressions only if the targets still improve.
    trials_run(job=job, arm=TrialRun.Arm.CANDIDATE, commit=it.candidate_commit, tasks=targets, iteration=it,
               should_stop=guard, max_trials=1)
    ran_regressions = False
    if cascade_continue(results=_results(job=job, iteration=it)):
        trials_run(job=job, arm=TrialRun.Arm.CANDIDATE, commit=it.candidate_commit, tasks=targets, iteration=it,
                   should_stop=guard)
        ran_regressions = cascade_continue(results=_results(job=job, iteration=it))
    if ran_regressions:
        trials_run(job=job, arm=TrialRun.Arm.CANDIDATE, commit=it.candidate_commit,
                   tasks=list(job.tasks.filter(kind=TaskSpec.Kind.REGRESSION)), iteration=it, should_stop=guard)
    matrix = [{"task_id": r.task_id, "seed": r.seed, "kind": r.kind, "baseline": r.baseline, "candidate": r.candidate}
              for r in _results(job=job, iteration=it)]
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="matrix", name="matrix.json", content=matrix)
    advance(job=job, to_state=S.VERDICT, event="trials_done", stage="verdict", iteration=it.n,
            data={"regressions_run": ran_regressions})


def _results(*, job: EvolutionJob, iteration: Iteration):
    return results_from_trials(
        tasks=list(job.tasks.all()),
        baseline_runs=TrialRun.objects.filter(job=job, arm=TrialRun.Arm.BASELINE),
        candidate_runs=TrialRun.objects.filter(job=job, iteration=iteration, arm=TrialRun.Arm.CANDIDATE),
    )


def verdict(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    gates = it.metrics.get("gates", [])
    result = verdict_compute(results=_results(job=job, iteration=it),
                             gates_passed=bool(gates) and all(g["passed"] is not False for g in gates),
                             policy=job.policy)
    # The verdict and the job's move are one commit: a reader never sees a decision on a job still in VERDICT
    # (the job page showed PROMOTE_ELIGIBLE under the state VERDICT in between).
    with transaction.atomic():
        Verdict.objects.update_or_create(iteration=it, defaults={
            "decision": result.decision, "rules": result.rules, "policy": job.policy, "summary": result.summary,
            "grader_commit": job.base_commit})
        it.status, it.verdict, it.score = Iteration.Status.EVALUATED, result.decision, result.score
        it.metrics = {**it.metrics, **result.metrics}
        it.save(update_fields=["status", "verdict", "score", "metrics"])
        artifact_store(job=job, iteration=it, stage_run=stage_run, kind="verdict", name="verdict.json",
                       content={"decision": result.decision, "rules": result.rules, "summary": result.summary})
        StageRun.objects.filter(pk=stage_run.pk).update(outcome=result.decision)
        data = {"decision": result.decision, "summary": result.summary, "iteration": it.n}
        if result.decision == PROMOTE_ELIGIBLE:
            advance(job=job, to_state=S.AWAITING_CONSENT, event="promote_eligible", data=data, best_iteration=it)
        elif result.decision == REJECT_REGRESSION and job.policy["end_on_regression"]:
            finish(job=job, to_state=S.REJECTED, reason="regression", data=data,
                   best_iteration=best_iteration(job=job))
        else:
            reason = {NEED_MORE_WORK: "need_more_work", NO_IMPROVEMENT: "no_improvement",
                      REJECT_REGRESSION: "regression"}[result.decision]
            iteration_end(job=job, iteration=it, reason=reason)
    return result.decision


def promote(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    """PR mode: push evo/<job>/<iteration> to the target's remote after re-checking the approved patch's hash."""
    best = job.best_iteration
    mirror = mirror_path(target_id=job.target_id)
    diff = git.commit_diff(repo_path=mirror, base=best.base_commit, head=best.candidate_commit)
    sha = hashlib.sha256(diff.encode()).hexdigest()
    if sha != job.consent_patch_sha256:
        finish(job=job, to_state=S.FAILED, reason="patch_changed",
               error=f"The candidate's patch hash is {sha}, the approved one {job.consent_patch_sha256}")
        return "patch_changed"
    if job.config_snapshot.get("mode", "pr") == "hot_swap":
        from evolution.services.hot_swap import hot_swap_job_promote

        return hot_swap_job_promote(job=job, stage_run=stage_run, best=best, mirror=mirror, sha=sha)
    branch = f"evo/{job.pk}/{best.n}"
    remote = job.config_snapshot["push_url"]
    git.branch_push(repo_path=mirror, commit=best.candidate_commit, remote_url=remote, branch=branch)
    artifact_store(job=job, iteration=best, stage_run=stage_run, kind="promotion", name="pr.json",
                   content={"branch": branch, "remote": remote, "commit": best.candidate_commit, "patch_sha256": sha})
    finish(job=job, to_state=S.PR_OPENED, reason="pr_opened", pr_branch=branch,
           data={"branch": branch, "commit": best.candidate_commit})


HANDLERS = {"prepare": prepare, "baseline": baseline, "trials": trials, "verdict": verdict, "promote": promote}
