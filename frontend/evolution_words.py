"""What the job page says to a reviewer: each state's and verdict's meaning, each gate's check and result, the
per-task rows and the one-sentence summary of the trials, in plain words."""

from __future__ import annotations


# One name per state and per verdict, everywhere (pages, README, API, JOBS.md): a job's state is a JobState value, an
# iteration's verdict one of verdict.py's decisions. The pages show the name with its meaning in plain words.
STATE_MEANINGS = {
    "QUEUED": "waiting for a worker", "PREPARING": "preparing a copy of the target",
    "BASELINE": "running the tasks on the current code", "LOCATING": "looking for the cause",
    "PLANNING": "planning a fix", "PLAN_REVIEW": "reviewing the plan", "IMPLEMENTING": "writing the fix",
    "CODE_REVIEW": "reviewing the code", "CHECKING": "checking the change (files, size, secrets, tests)",
    "TRIALS": "running the tasks on the fix", "VERDICT": "scoring the trials",
    "AWAITING_CONSENT": "awaiting your decision", "PROMOTING": "applying the approved fix",
    "HEALTH_CHECK": "watching the new release's health", "ROLLING_BACK": "going back to the last good release",
    "PROMOTED": "the fix is live", "PR_OPENED": "the fix's branch is pushed for review",
    "REJECTED": "ended: no acceptable fix was found", "NO_IMPROVEMENT": "ended: nothing fixed the failing tasks",
    "ROLLED_BACK": "ended: the release was unhealthy and was rolled back", "FAILED": "ended with an error",
    "CANCELLED": "cancelled", "EXPIRED": "ended: nobody decided in time",
}
# A PROMOTED job whose release was rolled back since: its state stays PROMOTED (the job did promote), but the fix is
# no longer live, and no page may say it is.
PROMOTED_ROLLED_BACK_MEANING = "promoted, then its release was rolled back: the fix is no longer live"


def state_meaning(state: str, *, rolled_back: bool = False) -> str:
    if state == "PROMOTED" and rolled_back:
        return PROMOTED_ROLLED_BACK_MEANING
    return STATE_MEANINGS.get(state, "")


VERDICT_MEANINGS = {
    "PROMOTE_ELIGIBLE": "good enough to apply; a person decides",
    "NEED_MORE_WORK": "better, but not enough yet",
    "REJECT_REGRESSION": "rejected: it makes other tasks worse",
    "NO_IMPROVEMENT": "rejected: a check failed or the failing tasks did not improve",
}
# What each gate checks, in plain words; its code name (services/gates.py, services/verdict.py) is the row's tooltip.
CHECK_WORDS = {
    "paths": "Only files the target lets the fix edit are changed, and no existing test",
    "diff_budget": "The change stays within the size limit, with no binary file and no new executable",
    "dependencies": "No dependency manifest (requirements, lock files…) is changed",
    "secrets": "No key, token or password in the added lines",
    "tests": "The target's own tests fail no more than before the change",
    "G0_hard_gates": "The change passed the safety checks (files, size, dependencies, secrets, tests)",
    "reviewer_veto": "No reviewer vetoed the change",
    "G1_target_delta": "The failing tasks score higher on average",
    "G1_fixed_fraction": "Enough of the failing tasks now pass (in most of their trials)",
    "G2_per_task": "No other task passes fewer of its trials than before",
    "G2_no_flips": "No task that passed every trial before fails every trial now",
    "G2_mean_drop": "The other tasks' average score does not drop beyond the allowed margin",
}


def _num(value, signed: bool = False) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:+.2f}" if signed else f"{value:.2f}".rstrip("0").rstrip(".")


def check_result(rule: dict) -> str:
    """A gate's value against its threshold, in words."""
    name, value, threshold = rule.get("name"), rule.get("value"), rule.get("threshold")
    if rule.get("passed") is None:
        return "not run"
    if name == "G1_target_delta" and isinstance(value, (int, float)):
        return f"{_num(value, True)} on average (needs at least {_num(threshold, True)})"
    if name == "G1_fixed_fraction" and isinstance(value, (int, float)) and isinstance(threshold, (int, float)):
        return f"{value:.0%} fixed (needs {threshold:.0%})"
    if name == "G2_mean_drop" and isinstance(value, (int, float)):
        return f"{_num(value, True)} on average (may go down to {_num(threshold, True)})"
    if name in ("G2_per_task", "G2_no_flips", "dependencies"):
        return ", ".join(map(str, value)) if value else {"dependencies": "none changed"}.get(name, "none")
    if name == "diff_budget" and isinstance(value, dict):
        limit = threshold if isinstance(threshold, dict) else {}
        text = f"{value.get('files')} file(s), {value.get('lines')} line(s)"
        return text + (f" (limit {limit.get('max_files')} files, {limit.get('max_lines')} lines)" if limit else "")
    if name == "paths" and isinstance(value, int):
        return "all allowed" if value == 0 else f"{value} file(s) not allowed"
    if name == "secrets" and isinstance(value, int):
        return "none found" if value == 0 else f"{value} found"
    if name == "G0_hard_gates":
        return "all passed" if value else "one failed"
    if name == "tests":
        return str(rule.get("detail") or value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


def check_rows(rules) -> list[dict]:
    """The gates of an iteration (its hard gates or its verdict's rules) for the page: what each checks in plain words,
    its code name for the tooltip, the result in words and the gate's own detail when it says more than "ok"."""
    rows = []
    for rule in rules or []:
        name = str(rule.get("name", ""))
        detail, result = str(rule.get("detail") or ""), check_result(rule)
        if detail in ("ok", result) or detail.startswith("mean "):  # "ok", the result again, or what is checked
            detail = ""
        rows.append({"code": name, "check": CHECK_WORDS.get(name, name.replace("_", " ")), "passed": rule.get("passed"),
                     "result": result, "detail": detail,
                     "offending": rule.get("offending") or []})
    return rows


def task_rows(tasks) -> tuple[list[dict], list[dict]]:
    """Per-task rows: the targets and any task whose result moved first; the other tasks that did not move (the
    unchanged regressions, or those the cascade did not run) apart, to be folded."""
    shown, same = [], []
    for task in tasks:
        moved = task["candidate"] and (task["delta"] or task["candidate_passes"] != task["baseline_passes"])
        (shown if task["kind"] == "target" or moved else same).append(task)
    shown.sort(key=lambda t: t["kind"] != "target")
    return shown, same


def _distinct(rows) -> int:
    return len({row["task_id"] for row in rows})


def trials_sentence(tasks) -> str:
    """What the trials showed, in one sentence: how many failing tasks the candidate fixes, and whether others got
    worse (the verdict's own summary, in words). A row is a task at one seed: tasks are counted once whatever their
    seeds, and the seeds are said apart when a task has several. A task counts as fixed when every seed of it that
    failed now passes."""
    targets = [t for t in tasks if t["kind"] == "target" and t["candidate"]]
    others = [t for t in tasks if t["kind"] != "target"]
    if not targets:
        return ""
    failing = [t for t in targets if 2 * t["baseline_passes"] <= len(t["baseline"])]
    fixed = [t for t in failing if 2 * t["candidate_passes"] > len(t["candidate"])]
    unfixed = {t["task_id"] for t in failing if 2 * t["candidate_passes"] <= len(t["candidate"])}
    n_failing = _distinct(failing)
    n_fixed = n_failing - len(unfixed)
    deltas = [t["delta"] for t in targets if t["delta"] is not None]
    notes = [f"{len(fixed)} of their {len(failing)} failing seeds"] if len(failing) != n_failing else []
    notes += [f"mean score {sum(deltas) / len(deltas):+.2f}"] if deltas else []
    text = (f"It fixes {n_fixed} of the {n_failing} failing task{'s' if n_failing != 1 else ''}"
            + (f" ({'; '.join(notes)})" if notes else ""))
    ran = [t for t in others if t["candidate"]]
    worse = sorted({t["task_id"] for t in ran if t["candidate_passes"] < t["baseline_passes"]})
    if not others:
        return text + "."
    n_others, n_ran = _distinct(others), _distinct(ran)
    if not ran:
        return text + (f"; the {n_others} other tasks were not run." if n_others != 1 else
                       "; the other task was not run.")
    ran_words = f"other tasks that ran ({n_others - n_ran} not run)" if n_ran < n_others else "other tasks"
    return text + (f"; {len(worse)} of the {n_ran} {ran_words} got worse: {', '.join(worse)}." if worse else
                   f"; none of the {n_ran} {ran_words} got worse.")


def tasks_same_sentence(same) -> str:
    """The folded rows' summary: how many of them ran and did not change, and how many were not run, apart (tasks
    counted once whatever their seeds)."""
    ran = [t for t in same if t["candidate"]]
    n_ran, n_not_run = _distinct(ran), _distinct([t for t in same if not t["candidate"]])
    parts = []
    if n_ran:
        parts.append(f"{n_ran} other task{'s' if n_ran != 1 else ''} ran, "
                     + ("none changed" if n_ran > 1 else "unchanged"))
    if n_not_run:
        parts.append(f"{n_not_run} {'more ' if n_ran else 'other '}task{'s' if n_not_run != 1 else ''} "
                     f"{'were' if n_not_run != 1 else 'was'} not run")
    return "; ".join(parts)
