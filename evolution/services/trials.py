"""Tasks and trials (evolution.md §7.9): the task snapshot, paired baseline/candidate trials in the sandbox, grades
from the grader pinned at the base commit."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from evolution.config import command_render
from evolution.errors import EvolutionError
from evolution.models import TERMINAL_STATES, EvolutionJob, Iteration, JobState, TaskSpec, TrialRun
from evolution.sandbox import Limits, ProcResult, sandbox_runner_get
from evolution.sandbox.files import owner_limits, written_tree_read
from evolution.services.workspace import artifact_store, job_paths, worktree_at


class StopRequested(Exception):
    """The job was asked to stop; the stage ends it CANCELLED."""


def command_run(*, job: EvolutionJob, template: str, workdir: Path, values: dict | None = None,
                timeout_s: float, rw_paths=(), ro_paths=(), should_stop: Callable[[], bool] | None = None
                ) -> ProcResult:
    runner = sandbox_runner_get(level=job.sandbox_level or None)
    cmd = command_render(template, **(values or {}))
    return runner.run(cmd=cmd, workdir=workdir, rw_paths=tuple(rw_paths), ro_paths=tuple(ro_paths), env={},
                      limits=Limits(wall_s=timeout_s), should_stop=should_stop)


def last_json(text: str):
    """The last line of a command's stdout that parses as JSON (commands may log before their result)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


# --- the task snapshot ------------------------------------------------------------------------------------------------


def _insight_failing_traces(*, job: EvolutionJob) -> list[tuple[str, int, str]]:
    from diagnosis.selectors import insight_evidence_list, insight_statement_list
    from traces.selectors import span_list_for_trace

    traces = {}
    for statement in insight_statement_list(project=job.project, insight=job.insight):
        traces[statement.trace.pk] = statement.trace
    for evidence in insight_evidence_list(project=job.project, insight=job.insight):
        traces[evidence.trace.pk] = evidence.trace
    found = []
    for trace in sorted(traces.values(), key=lambda t: t.trace_id):
        if trace.outcome != "failure":
            continue
        root = span_list_for_trace(project=job.project, trace=trace).filter(span_id=trace.root_span_id).first()
        attributes = root.attributes if root is not None else {}
        task_id = trace.task_id or str(attributes.get("clear.task.id") or "")
        if not task_id:
            continue
        try:
            seed = int(attributes.get("clear.seed", 0))
        except (TypeError, ValueError):
            seed = 0
        found.append((task_id, seed, trace.trace_id))
    return found


def job_tasks_snapshot(*, job: EvolutionJob, should_stop=None) -> list[TaskSpec]:
    """Targets from the insight's failing traces; regressions from the suite (pinned base) and earlier fixes."""
    config = job.target_config
    policy = job.policy
    common = {"trials": policy["trials"], "timeout_s": config["trial_timeout_s"]}
    specs: dict[tuple[str, int], TaskSpec] = {}
    for task_id, seed, trace_id in _insight_failing_traces(job=job):
        specs.setdefault((task_id, seed), TaskSpec(job=job, kind=TaskSpec.Kind.TARGET, source="insight_trace",
                                                   task_id=task_id, seed=seed, trace_id=trace_id, **common))
    if not specs:
        raise EvolutionError(
            f"Insight {job.insight_id} has no failing traces with a task id (root span attribute clear.task.id); "
            "evolution needs tasks it can re-run", code="no_target_tasks")
    target_ids = {task_id for task_id, _ in specs}
    regressions: list[tuple[str, int, str]] = []
    if config.get("suite_command"):
        base = job_paths(job_id=job.pk).base_export
        result = command_run(job=job, template=config["suite_command"], workdir=base, timeout_s=300,
                             should_stop=should_stop)
        suite = last_json(result.stdout)
        if not result.ok or not isinstance(suite, list):
            raise EvolutionError(
                f"suite_command failed (exit {result.exit_code}) or did not print a JSON array of "
                f"{{task_id, seed}}: {(result.stderr or result.stdout)[-500:]}", code="suite_failed")
        for entry in suite:
            if not isinstance(entry, dict) or not entry.get("task_id"):
                raise EvolutionError(f"suite_command printed an entry without task_id: {entry!r}",
                                     code="suite_failed")
            regressions.append((str(entry["task_id"]), int(entry.get("seed", 0)), "suite"))
    promoted = TaskSpec.objects.filter(
        job__target=job.target, job__state__in=[JobState.PROMOTED, JobState.PR_OPENED], kind=TaskSpec.Kind.TARGET,
    ).exclude(job=job).values_list("task_id", "seed")
    regressions += [(task_id, seed, "promoted") for task_id, seed in promoted]
    for task_id, seed, source in regressions:
        if task_id in target_ids:
            continue
        specs.setdefault((task_id, seed), TaskSpec(job=job, kind=TaskSpec.Kind.REGRESSION, source=source,
                                                   task_id=task_id, seed=seed, **common))
    TaskSpec.objects.filter(job=job).delete()  # a redelivered prepare snapshots again
    return TaskSpec.objects.bulk_create(specs.values())


# --- trials -----------------------------------------------------------------------------------------------------------


def _grade(*, job: EvolutionJob, task: TaskSpec, out: Path, proc: ProcResult, should_stop) -> tuple[float, bool, dict]:
    if proc.timed_out:
        return 0.0, False, {"reasons": [f"trial timed out after {task.timeout_s:g} s"]}
    if proc.cancelled:
        raise StopRequested()
    base = job_paths(job_id=job.pk).base_export
    graded = command_run(job=job, template=job.target_config["grader_command"], workdir=base,
                         values={"task_id": task.task_id, "seed": task.seed, "out": out}, timeout_s=120,
                         ro_paths=[out], should_stop=should_stop)
    if graded.cancelled:
        raise StopRequested()
    grade = last_json(graded.stdout)
    if not graded.ok or not isinstance(grade, dict) or "score" not in grade:
        return 0.0, False, {"reasons": [f"grader failed (exit {graded.exit_code}): "
                                        f"{(graded.stderr or graded.stdout)[-400:]}"], "grader_error": True}
    try:
        score = min(1.0, max(0.0, float(grade["score"])))
    except (TypeError, ValueError):
        return 0.0, False, {"reasons": [f"grader score {grade['score']!r} is not a number"], "grader_error": True}
    return score, bool(grade.get("passed", score >= 1.0)), grade


def trials_run(*, job: EvolutionJob, arm: str, commit: str, tasks: list[TaskSpec], iteration: Iteration | None,
               should_stop, max_trials: int | None = None) -> list[TrialRun]:
    """n trials of each task at `commit` (at most max_trials), paired by trial index with the other arm (same
    seeds). Trials already recorded (a redelivered stage, or the first trial of the cascade) are kept, not re-run."""
    iteration_n = iteration.n if iteration else 0
    paths = job_paths(job_id=job.pk)
    runs = []
    for task in tasks:
        for trial_n in range(min(task.trials, max_trials or task.trials)):
            existing = TrialRun.objects.filter(job=job, iteration_n=iteration_n, task=task, arm=arm,
                                               trial_n=trial_n).first()
            if existing is not None:
                runs.append(existing)
                continue
            if should_stop():
                raise StopRequested()
            worktree = worktree_at(job=job, commit=commit)  # nothing a previous trial wrote survives
            out = paths.trials / f"{iteration_n}-{arm}" / f"{task.pk}-{trial_n}"
            out.mkdir(parents=True, exist_ok=True)
            # The recorded seed reproduced the failure, so every trial replays it; trials differ only by the agent's
            # own nondeterminism, and both arms see the same seeds.
            seed = task.seed
            proc = command_run(job=job, template=job.target_config["trial_command"], workdir=worktree,
                               values={"task_id": task.task_id, "seed": seed, "out": out}, timeout_s=task.timeout_s,
                               rw_paths=[out], should_stop=should_stop)
            score, passed, grade = _grade(job=job, task=task, out=out, proc=proc, should_stop=should_stop)
            log = artifact_store(job=job, iteration=iteration, kind="trial_trace",
                                 name=f"{arm}-{task.task_id}-{trial_n}.json",
                                 content={"stdout": proc.stdout[-20000:], "stderr": proc.stderr[-20000:],
                                          "exit_code": proc.exit_code, "timed_out": proc.timed_out,
                                          "files": _out_files(out=out, level=proc.isolation_level)})
            runs.append(TrialRun.objects.create(
                job=job, iteration=iteration, iteration_n=iteration_n, task=task, arm=arm, trial_n=trial_n, seed=seed,
                score=score, passed=passed, duration_s=proc.duration_s, exit_code=proc.exit_code,
                timed_out=proc.timed_out, isolation_level=str(proc.isolation_level), grade=grade, artifact=log,
                error="" if proc.ok else (proc.stderr or proc.stdout)[-2000:],
            ))
    return runs


def _out_files(*, out: Path, level: str) -> dict[str, str]:
    """What the trial left in {out}, for its trace. The run chose every name there: links, FIFOs and huge files are
    listed with the reason they were not read (evolution/sandbox/files.py), never read with the worker's rights."""
    return {written.path: written.text(max_chars=20000)
            for written in written_tree_read(folder=out, owners=owner_limits(level=level))}


def job_is_stopping(*, job_id: int) -> bool:
    return EvolutionJob.objects.filter(pk=job_id, stop_requested=True).exclude(state__in=TERMINAL_STATES).exists()
