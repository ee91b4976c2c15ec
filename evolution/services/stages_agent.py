"""The coding-agent stages: locate → plan ⇄ plan review → implement ⇄ code review → check (the hard gates)."""

from __future__ import annotations

import hashlib
import os

from django.utils import timezone

from evolution import git
from evolution.backends import Role
from evolution.models import Artifact, EvolutionJob, JobState, StageRun, TaskSpec, TrialRun
from evolution.sandbox.files import owner_limits, written_tree_read
from evolution.services.gates import Gate, failed_tests, gate_tests, gates_report, gates_static
from evolution.services.loop import code_round_failed, feedback_for, iteration_current, iteration_failed
from evolution.services.roles import code_review_decision, data_block, role_run
from evolution.services.stages import advance, finish
from evolution.services.trials import StopRequested, command_run, job_is_stopping
from evolution.services.workspace import StopGuard, artifact_json, artifact_store, job_paths, worktree_at
from evolution.summary_grounding import changed_file_texts, implementer_output_grounded

S = JobState
# A CLI's stream-json stdout runs to tens of megabytes (evolution/backends/external.py caps it at 20 M characters).
LOG_MAX_BYTES = 96 * 1024 * 1024
LOG_MAX_FILES = 200


def _latest(*, job: EvolutionJob, kind: str, iteration_n: int | None = None) -> dict | None:
    artifacts = Artifact.objects.filter(job=job, kind=kind)
    if iteration_n is not None:
        artifacts = artifacts.filter(iteration__n=iteration_n)
    artifact = artifacts.order_by("-created_at", "-pk").first()
    return artifact_json(artifact=artifact) if artifact else None


def _targets_block(job: EvolutionJob) -> str:
    tasks = []
    for task in job.tasks.filter(kind=TaskSpec.Kind.TARGET):
        runs = TrialRun.objects.filter(task=task, arm="baseline")
        reasons = [reason for run in runs for reason in run.grade.get("reasons", [])]
        tasks.append({"task_id": task.task_id, "seed": task.seed, "trace_id": task.trace_id,
                      "baseline_grader_reasons": sorted(set(map(str, reasons)))[:10]})
    return data_block("failing_tasks", tasks)


def _insight_block(job: EvolutionJob) -> str:
    insight = job.insight
    return data_block("insight", {"title": insight.title, "description": insight.description,
                                  "root_cause": insight.root_cause, "recommendation": insight.recommendation,
                                  "node": insight.node})


def _run(job, stage_run, role, iteration, round_, user_input):
    paths = job_paths(job_id=job.pk)
    outcome = role_run(job=job, stage_run=stage_run, role=role, iteration=iteration.n, round_=round_,
                       user_input=user_input, workdir=paths.worktree, extra_ro_dirs=(),
                       log_dir=paths.logs / f"{iteration.n}-{role}-{round_}")
    result = outcome.result
    if job_is_stopping(job_id=job.pk):  # a cancelled backend returns a failure; it is a cancellation
        raise StopRequested()
    stage_run.exit_code, stage_run.timed_out = result.exit_code, result.timed_out
    stage_run.session_id = result.session_id or ""
    stage_run.tokens_in, stage_run.tokens_out, stage_run.cost_usd = result.tokens_in, result.tokens_out, result.cost_usd
    stage_run.output = outcome.output if outcome.output is not None else result.output
    stage_run.outcome = outcome.problem or stage_run.outcome
    stage_run.error = outcome.detail
    if result.exit_code != 0 or result.timed_out or outcome.problem in ("BACKEND_FAILED", "ROLE_VIOLATED_READONLY"):
        # The stage follows its role process: a non-zero exit (even on the repair call, which the loop then treats
        # as malformed output) or a timeout fails it, whatever the handler does with the job next.
        stage_run.status, stage_run.finished_at = StageRun.Status.FAILED, timezone.now()
    stage_run.save()
    log_dir = paths.logs / f"{iteration.n}-{role}-{round_}"
    # Transcripts and prompts outlive the job dir. The backend's CLI wrote its scratch dir in there as the sandbox
    # user: read like a trial's {out} (evolution/sandbox/files.py); the backend's own logs may be larger.
    owners = {**owner_limits(), os.geteuid(): LOG_MAX_BYTES}
    for written in written_tree_read(folder=log_dir, owners=owners, max_files=LOG_MAX_FILES):
        content = written.data if written.data is not None else f"skipped: {written.skipped}"
        artifact_store(job=job, iteration=iteration, stage_run=stage_run, kind="log",
                       name=f"{role}-{round_}/{written.path}", content=content, mime="text/plain")
    if outcome.problem == "ROLE_VIOLATED_READONLY":
        worktree_at(job=job, commit=iteration.candidate_commit or iteration.base_commit)
        finish(job=job, to_state=S.FAILED, reason="role_violated_readonly", error=outcome.detail)
        return None
    if outcome.problem == "BACKEND_FAILED":
        finish(job=job, to_state=S.FAILED, reason="backend_failed", error=outcome.detail)
        return None
    return outcome


def locate(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    worktree_at(job=job, commit=it.base_commit)
    earlier = [{"iteration": i.n, "verdict": i.verdict or i.failure_reason,
                "summary": getattr(getattr(i, "verdict_record", None), "summary", ""),
                "feedback": [f["summary"] for f in i.feedback][-3:]}
               for i in job.iterations.filter(n__lt=it.n).select_related("verdict_record")]
    prompt = "\n\n".join(filter(None, [_insight_block(job), _targets_block(job),
                                       data_block("earlier_iterations", earlier) if earlier else ""]))
    outcome = _run(job, stage_run, Role.LOCATOR, it, round_, prompt)
    if outcome is None:
        return "ended"
    if outcome.problem:
        iteration_failed(job=job, iteration=it, reason="locator_output_malformed", detail=outcome.detail)
        return outcome.problem
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="diagnosis", name="diagnosis.json",
                   content=outcome.output)
    advance(job=job, to_state=S.PLANNING, event="located", stage="plan", iteration=it.n, round=0)


def plan(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    worktree_at(job=job, commit=it.base_commit)
    reviews = feedback_for(iteration=it, stages=("plan_review",))
    parts = [_insight_block(job), _targets_block(job),
             data_block("diagnosis", _latest(job=job, kind="diagnosis", iteration_n=it.n))]
    if reviews:
        parts.append("The reviewer rejected the previous plan. Address every issue below.")
        parts.append(data_block("plan_review_feedback", reviews[-1]))
    outcome = _run(job, stage_run, Role.PLANNER, it, round_, "\n\n".join(parts))
    if outcome is None:
        return "ended"
    if outcome.problem:
        return _plan_rejected(job, it, round_, [{"severity": "important", "detail": outcome.detail}], outcome.problem)
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="plan", name=f"plan-{round_}.json",
                   content=outcome.output)
    advance(job=job, to_state=S.PLAN_REVIEW, event="planned", stage="plan_review", iteration=it.n, round=round_)


def _plan_rejected(job, it, round_, issues, summary):
    from evolution.services.loop import feedback_add

    feedback_add(iteration=it, stage="plan_review", round_=round_, items=issues, summary=summary)
    if round_ + 1 < job.policy["plan_rounds"]:
        advance(job=job, to_state=S.PLANNING, event="plan_rejected", stage="plan", iteration=it.n, round=round_ + 1)
    else:
        iteration_failed(job=job, iteration=it, reason="plan_rejected", detail=summary)
    return "REJECT"


def plan_review(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    prompt = "\n\n".join([_targets_block(job),
                          data_block("diagnosis", _latest(job=job, kind="diagnosis", iteration_n=it.n)),
                          data_block("plan", _latest(job=job, kind="plan", iteration_n=it.n))])
    outcome = _run(job, stage_run, Role.PLAN_REVIEWER, it, round_, prompt)
    if outcome is None:
        return "ended"
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="plan_review", name=f"plan_review-{round_}.json",
                   content=outcome.output or {"problem": outcome.problem, "detail": outcome.detail})
    if outcome.problem or outcome.output["verdict"] != "APPROVE":
        issues = (outcome.output or {}).get("issues") or [{"severity": "important", "detail": outcome.detail}]
        StageRun.objects.filter(pk=stage_run.pk).update(outcome=outcome.problem or outcome.output["verdict"])
        return _plan_rejected(job, it, round_, issues, outcome.problem or outcome.output["verdict"])
    StageRun.objects.filter(pk=stage_run.pk).update(outcome="APPROVE")
    advance(job=job, to_state=S.IMPLEMENTING, event="plan_approved", stage="implement", iteration=it.n, round=0)


def implement(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    worktree = worktree_at(job=job, commit=it.base_commit)  # every round starts from the iteration base
    it.candidate_commit, it.patch_sha256 = "", ""
    it.save(update_fields=["candidate_commit", "patch_sha256"])
    parts = [_targets_block(job), data_block("approved_plan", _latest(job=job, kind="plan", iteration_n=it.n))]
    rejected = feedback_for(iteration=it, stages=("code_review", "check", "implement"))
    if rejected:
        parts.append("The previous implementation was rejected and discarded. Address every issue below.")
        parts.append(data_block("rejection_feedback", rejected[-1]))
    request = "\n\n".join(parts)
    outcome = _run(job, stage_run, Role.IMPLEMENTER, it, round_, request)
    if outcome is None:
        return "ended"
    if outcome.problem or outcome.output.get("status") != "DONE":
        detail = outcome.detail or f"implementer BLOCKED: {outcome.output.get('blocker')}"
        return code_round_failed(job=job, iteration=it, round_=round_, reason="implement_failed", stage="implement",
                                 items=[{"severity": "important", "detail": detail}], summary=detail) and "REJECT"
    commit = git.worktree_commit_all(
        worktree_path=worktree,
        message=f"evolution: job {job.pk} iteration {it.n}\n\nClear-Job: {job.pk}\nClear-Iteration: {it.n}\n"
                f"Clear-Round: {round_}\nClear-Backend: {job.backend_name}\n")
    if commit is None:
        return code_round_failed(job=job, iteration=it, round_=round_, reason="empty_diff", stage="implement",
                                 items=[], summary="the implementer changed no file") and "EMPTY"
    diff = git.commit_diff(repo_path=worktree, base=it.base_commit, head=commit)
    it.candidate_commit, it.patch_sha256 = commit, hashlib.sha256(diff.encode()).hexdigest()
    it.save(update_fields=["candidate_commit", "patch_sha256"])
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="patch", name=f"patch-{round_}.diff",
                   content=diff, mime="text/x-diff")
    # The summary is shown on the job page: grounded in the request and the patch, or replaced (issue 43).
    shown = implementer_output_grounded(output=outcome.output, diff=diff,
                                        evidence_texts=[request, *changed_file_texts(worktree=worktree, diff=diff)])
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="implementer", name=f"implementer-{round_}.json",
                   content=shown)
    advance(job=job, to_state=S.CODE_REVIEW, event="implemented", stage="code_review", iteration=it.n, round=round_,
            data={"commit": commit})


def code_review(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    worktree = worktree_at(job=job, commit=it.candidate_commit)
    diff = git.commit_diff(repo_path=worktree, base=it.base_commit, head=it.candidate_commit)
    prompt = "\n\n".join([data_block("approved_plan", _latest(job=job, kind="plan", iteration_n=it.n)),
                          data_block("diff", diff)])
    outcome = _run(job, stage_run, Role.CODE_REVIEWER, it, round_, prompt)
    if outcome is None:
        return "ended"
    review = outcome.output or {"problem": outcome.problem, "detail": outcome.detail}
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="code_review", name=f"code_review-{round_}.json",
                   content=review)
    decision, blocking = ("REJECT", [{"severity": "important", "detail": outcome.detail}]) if outcome.problem \
        else code_review_decision(outcome.output)
    StageRun.objects.filter(pk=stage_run.pk).update(outcome=decision)
    if decision != "APPROVE":
        code_round_failed(job=job, iteration=it, round_=round_, reason="code_rejected", stage="code_review",
                          items=blocking, summary="; ".join(str(i.get("detail", "")) for i in blocking)[:2000])
        return "REJECT"
    advance(job=job, to_state=S.CHECKING, event="code_approved", stage="check", iteration=it.n, round=round_)


def check(*, job: EvolutionJob, stage_run: StageRun, iteration: int, round_: int):
    it = iteration_current(job=job)
    worktree = worktree_at(job=job, commit=it.candidate_commit)
    config = job.target_config
    gates, _diff = gates_static(worktree=worktree, base=it.base_commit, candidate=it.candidate_commit, config=config)
    guard = StopGuard(job_id=job.pk)
    timeout = job.policy["check_timeout_s"]
    if all(g.passed for g in gates):
        if config.get("install_command"):
            proc = command_run(job=job, template=config["install_command"], workdir=worktree, timeout_s=timeout,
                               should_stop=guard)
            gates.append(Gate("install", proc.ok, value=proc.exit_code, threshold=0,
                              detail="ok" if proc.ok else (proc.stderr or proc.stdout)[-1000:]))
        if config.get("test_command") and all(g.passed for g in gates):
            worktree_at(job=job, commit=it.candidate_commit)
            proc = command_run(job=job, template=config["test_command"], workdir=worktree, timeout_s=timeout,
                               should_stop=guard)
            if proc.cancelled:
                raise StopRequested()
            gates.append(gate_tests(baseline=_latest(job=job, kind="baseline_test_report"), exit_code=proc.exit_code,
                                    timed_out=proc.timed_out, output=proc.stdout + "\n" + proc.stderr))
            artifact_store(job=job, iteration=it, stage_run=stage_run, kind="test_report", name=f"tests-{round_}.json",
                           content={"exit_code": proc.exit_code, "failures": sorted(failed_tests(proc.stdout)),
                                    "output": (proc.stdout + proc.stderr)[-20000:]})
    report = gates_report(gates)
    artifact_store(job=job, iteration=it, stage_run=stage_run, kind="gate_report", name=f"gates-{round_}.json",
                   content=report)
    failed = [g for g in gates if g.passed is False]
    it.metrics = {**it.metrics, "gates": report}
    it.save(update_fields=["metrics"])
    if failed:
        StageRun.objects.filter(pk=stage_run.pk).update(outcome="GATES_FAILED")
        code_round_failed(job=job, iteration=it, round_=round_, reason="gates_failed", stage="check",
                          items=[{"gate": g.name, "detail": g.detail} for g in failed],
                          summary="; ".join(f"{g.name}: {g.detail}" for g in failed)[:2000])
        return "GATES_FAILED"
    StageRun.objects.filter(pk=stage_run.pk).update(outcome="GATES_PASSED")
    advance(job=job, to_state=S.TRIALS, event="gates_passed", stage="trials", iteration=it.n)


HANDLERS = {"locate": locate, "plan": plan, "plan_review": plan_review, "implement": implement,
            "code_review": code_review, "check": check}
