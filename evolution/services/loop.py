"""Loop control (deterministic): rounds inside an iteration, the next iteration or the end, the best candidate."""

from __future__ import annotations

from evolution.models import EvolutionJob, Iteration, JobState
from evolution.services.stages import advance, finish

S = JobState


def iteration_current(*, job: EvolutionJob) -> Iteration:
    return Iteration.objects.get(job=job, n=job.current_iteration)


def feedback_add(*, iteration: Iteration, stage: str, round_: int, items: list, summary: str = "") -> None:
    iteration.feedback = [*iteration.feedback, {"stage": stage, "round": round_, "summary": summary, "items": items}]
    iteration.save(update_fields=["feedback"])


def feedback_for(*, iteration: Iteration, stages: tuple[str, ...]) -> list[dict]:
    return [f for f in iteration.feedback if f["stage"] in stages]


def best_iteration(*, job: EvolutionJob) -> Iteration | None:
    """Among candidates that improved on the baseline, the highest gate-satisfying score; the earliest on a tie
    (not the most recent)."""
    scored = list(job.iterations.filter(score__isnull=False, verdict__in=["PROMOTE_ELIGIBLE", "NEED_MORE_WORK"])
                  .order_by("n"))
    return max(scored, key=lambda it: (it.score, -it.n)) if scored else None


def plateaued(*, job: EvolutionJob) -> bool:
    """No evaluated iteration beat the best score so far (starting from the baseline) for plateau_iters iterations."""
    best = None
    stale = 0
    for it in job.iterations.filter(status=Iteration.Status.EVALUATED).order_by("n"):
        floor = it.metrics.get("target_baseline_mean", 0.0) if best is None else best
        if it.score is not None and it.score > floor:
            best, stale = it.score, 0
        else:
            stale += 1
    return stale >= job.policy["plateau_iters"]


def iteration_start(*, job: EvolutionJob, n: int, event: str, data: dict | None = None) -> EvolutionJob:
    # Each iteration starts from the job's base commit: a rejected candidate is discarded, not stacked on (§7.5).
    Iteration.objects.get_or_create(job=job, n=n, defaults={"base_commit": job.base_commit})
    return advance(job=job, to_state=S.LOCATING, event=event, stage="locate", iteration=n, current_iteration=n,
                   data={**(data or {}), "iteration": n})


def iteration_end(*, job: EvolutionJob, iteration: Iteration, reason: str) -> EvolutionJob:
    """The iteration is over without a promotable candidate: go on if budget remains and progress has not stalled."""
    if iteration.n < job.policy["max_iterations"] and not plateaued(job=job):
        return iteration_start(job=job, n=iteration.n + 1, event="next_iteration",
                               data={"previous": iteration.n, "reason": reason})
    best = best_iteration(job=job)
    if best is not None or reason in ("no_improvement", "need_more_work"):
        return finish(job=job, to_state=S.NO_IMPROVEMENT, reason=reason if best is None else "budget_exhausted",
                      best_iteration=best)
    return finish(job=job, to_state=S.REJECTED, reason=reason)


def iteration_failed(*, job: EvolutionJob, iteration: Iteration, reason: str, detail: str = "") -> EvolutionJob:
    iteration.status = Iteration.Status.FAILED
    iteration.failure_reason = reason
    iteration.save(update_fields=["status", "failure_reason"])
    if detail:
        feedback_add(iteration=iteration, stage="iteration", round_=0, items=[], summary=detail)
    return iteration_end(job=job, iteration=iteration, reason=reason)


def code_round_failed(*, job: EvolutionJob, iteration: Iteration, round_: int, reason: str, stage: str,
                      items: list, summary: str) -> EvolutionJob:
    """A rejected implementation (review, gates, empty diff): another implement round from the iteration base, or
    the iteration fails."""
    feedback_add(iteration=iteration, stage=stage, round_=round_, items=items, summary=summary)
    if round_ + 1 < job.policy["code_rounds"]:
        return advance(job=job, to_state=S.IMPLEMENTING, event=f"{stage}_rejected", stage="implement",
                       iteration=iteration.n, round=round_ + 1, data={"round": round_, "reason": reason})
    return iteration_failed(job=job, iteration=iteration, reason=reason, detail=summary)
