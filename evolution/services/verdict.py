"""The deterministic verdict of evolution.md §7.10: computed from trial results by code, never by a model."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

PROMOTE_ELIGIBLE = "PROMOTE_ELIGIBLE"
NEED_MORE_WORK = "NEED_MORE_WORK"
REJECT_REGRESSION = "REJECT_REGRESSION"
NO_IMPROVEMENT = "NO_IMPROVEMENT"


@dataclass(frozen=True)
class TaskResult:
    task_id: str
    seed: int
    kind: str  # target | regression
    baseline: tuple[tuple[float, bool], ...]  # (score, passed) per trial index
    candidate: tuple[tuple[float, bool], ...]  # empty: not run (cascade stopped)

    @staticmethod
    def _mean(trials) -> float:
        return sum(s for s, _ in trials) / len(trials) if trials else 0.0

    @staticmethod
    def _passes(trials) -> int:
        return sum(1 for _, p in trials if p)

    @property
    def baseline_mean(self) -> float:
        return self._mean(self.baseline)

    @property
    def candidate_mean(self) -> float:
        return self._mean(self.candidate)

    @property
    def baseline_passes(self) -> int:
        return self._passes(self.baseline)

    @property
    def candidate_passes(self) -> int:
        return self._passes(self.candidate)

    def majority(self, trials) -> bool:
        return bool(trials) and 2 * self._passes(trials) > len(trials)


@dataclass
class VerdictResult:
    decision: str
    rules: list[dict] = field(default_factory=list)
    summary: str = ""
    score: float | None = None  # candidate mean target score, when the candidate satisfies the gates
    metrics: dict = field(default_factory=dict)


def _rule(name, value, threshold, passed, detail="") -> dict:
    return {"name": name, "value": value, "threshold": threshold, "passed": passed, "detail": detail}


def verdict_compute(*, results: list[TaskResult], gates_passed: bool, policy: dict,
                    reviewer_veto: str = "") -> VerdictResult:
    targets = [r for r in results if r.kind == "target"]
    regressions = [r for r in results if r.kind == "regression"]
    rules = [_rule("G0_hard_gates", gates_passed, True, gates_passed)]
    if reviewer_veto:
        rules.append(_rule("reviewer_veto", reviewer_veto, "none", False, "an LLM reviewer vetoed the candidate"))

    delta = (sum(r.candidate_mean - r.baseline_mean for r in targets) / len(targets)) if targets else 0.0
    failing = [r for r in targets if not r.majority(r.baseline)]
    fixed = [r for r in failing if r.majority(r.candidate)]
    fixed_fraction = len(fixed) / len(failing) if failing else 0.0
    g1_delta = delta >= policy["min_target_delta"]
    g1_fixed = fixed_fraction >= policy["min_fixed_fraction"]
    rules.append(_rule("G1_target_delta", round(delta, 4), policy["min_target_delta"], g1_delta,
                       "mean target score, candidate − baseline"))
    rules.append(_rule("G1_fixed_fraction", round(fixed_fraction, 4), policy["min_fixed_fraction"], g1_fixed,
                       f"{len(fixed)} of {len(failing)} failing targets pass by majority: "
                       + ", ".join(r.task_id for r in fixed)))

    ran = [r for r in regressions if r.candidate]
    g2_detail, flips, losses = "", [], []
    for r in ran:
        n = len(r.baseline)
        if r.baseline_passes == n and r.candidate_passes == 0 and n:
            flips.append(r.task_id)
        tolerance = 0 if r.baseline_passes == n else policy["regression_tolerance"]
        if r.candidate_passes < r.baseline_passes - tolerance:
            losses.append(f"{r.task_id} ({r.baseline_passes}→{r.candidate_passes} of {n})")
    regression_delta = (sum(r.candidate_mean - r.baseline_mean for r in ran) / len(ran)) if ran else 0.0
    g2_drop = regression_delta >= -policy["max_regression_drop"]
    if regressions and not ran:
        g2_detail = "not run: the targets did not improve (cascade)"
    rules.append(_rule("G2_per_task", losses, "no task loses passes beyond tolerance", not losses,
                       g2_detail or ("; ".join(losses) or "ok")))
    rules.append(_rule("G2_no_flips", flips, "no pass^n → fail^n flip", not flips, ", ".join(flips) or "ok"))
    rules.append(_rule("G2_mean_drop", round(regression_delta, 4), -policy["max_regression_drop"], g2_drop,
                       "mean regression score, candidate − baseline"))
    g2 = not losses and not flips and g2_drop

    metrics = {
        "target_delta": delta, "fixed": [r.task_id for r in fixed], "failing_at_baseline": [r.task_id for r in failing],
        "regression_delta": regression_delta, "regressions_run": len(ran), "regressions_total": len(regressions),
        "target_candidate_mean": sum(r.candidate_mean for r in targets) / len(targets) if targets else 0.0,
        "target_baseline_mean": sum(r.baseline_mean for r in targets) / len(targets) if targets else 0.0,
    }
    score = metrics["target_candidate_mean"] if gates_passed and g2 and not reviewer_veto else None
    if not gates_passed or reviewer_veto:
        decision = NO_IMPROVEMENT
    elif not g2:
        decision = REJECT_REGRESSION
    elif g1_delta and g1_fixed:
        decision = PROMOTE_ELIGIBLE if len(ran) == len(regressions) else NEED_MORE_WORK
    elif delta > 0:
        decision = NEED_MORE_WORK
    else:
        decision = NO_IMPROVEMENT
    summary = (f"{decision}: target Δ {delta:+.2f}, {len(fixed)}/{len(failing)} fixed, regression Δ "
               f"{regression_delta:+.2f} over {len(ran)}/{len(regressions)} tasks"
               + (f"; regressed: {'; '.join(losses + flips)}" if losses or flips else ""))
    return VerdictResult(decision=decision, rules=rules, summary=summary, score=score, metrics=metrics)


def results_from_trials(*, tasks, baseline_runs, candidate_runs) -> list[TaskResult]:
    by_task: dict[int, dict[str, list]] = defaultdict(lambda: {"baseline": [], "candidate": []})
    for run in baseline_runs:
        by_task[run.task_id]["baseline"].append(run)
    for run in candidate_runs:
        by_task[run.task_id]["candidate"].append(run)
    results = []
    for task in tasks:
        arms = by_task[task.pk]
        pack = lambda runs: tuple((r.score, r.passed) for r in sorted(runs, key=lambda r: r.trial_n))  # noqa: E731
        results.append(TaskResult(task_id=task.task_id, seed=task.seed, kind=task.kind,
                                  baseline=pack(arms["baseline"]), candidate=pack(arms["candidate"])))
    return results


def cascade_continue(*, results: list[TaskResult]) -> bool:
    """Run the regressions only when the targets improved at all (the cheap subset first, §7.9)."""
    targets = [r for r in results if r.kind == "target"]
    return bool(targets) and sum(r.candidate_mean - r.baseline_mean for r in targets) > 0
