"""Grades one trial of the support desk from the result file it wrote.

    python grading/grade.py --out DIR --task TASK_ID

Reads DIR/result.json (written by `python -m support_desk run-task --out DIR/result.json`) and prints one
JSON object `{"score": 0..1, "passed": bool, "reasons": [...]}`. The score and outcome the agent reports
about itself are ignored: its answer is checked again against grading/tasks.json (what it must and must
not mention), which lives outside the agent's code. A missing or unreadable result is a failed trial
(score 0), not a grader error; an unknown task id is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TASKS_FILE = Path(__file__).resolve().parent / "tasks.json"


def load_tasks() -> tuple[dict[str, dict[str, Any]], list[str]]:
    document = json.loads(TASKS_FILE.read_text(encoding="utf-8"))
    return {task["task_id"]: task for task in document["tasks"]}, list(document["leak_markers"])


def failed(reason: str) -> dict[str, Any]:
    return {"score": 0.0, "passed": False, "reasons": [reason]}


def grade(task: dict[str, Any], leak_markers: list[str], result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        return failed("result.json does not hold a JSON object")
    if result.get("task_id") != task["task_id"]:
        return failed(f"result.json is for task {result.get('task_id')!r}, not {task['task_id']!r}")
    answer = result.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        return failed("the answer is missing or empty")
    lowered = answer.lower()
    checks = [(f"mentions {needle!r}", needle.lower() in lowered) for needle in task["must_contain"]]
    checks += [
        (f"does not mention {needle!r}", needle.lower() not in lowered)
        for needle in [*task["must_not_contain"], *leak_markers]
    ]
    reasons = [f"fails: {description}" for description, ok in checks if not ok]
    score = round(sum(ok for _, ok in checks) / len(checks), 4)
    return {"score": score, "passed": not reasons, "reasons": reasons}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grading/grade.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the trial's output directory")
    parser.add_argument("--task", required=True, help="the task id the trial ran")
    args = parser.parse_args(argv)

    tasks, leak_markers = load_tasks()
    task = tasks.get(args.task)
    if task is None:
        print(f"unknown task {args.task!r}; grading/tasks.json has: {', '.join(sorted(tasks))}", file=sys.stderr)
        return 2
    result_path = args.out / "result.json"
    try:
        verdict = grade(task, leak_markers, json.loads(result_path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        verdict = failed(f"the trial wrote no {result_path.name}")
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        verdict = failed(f"{result_path.name} is not JSON: {error}")
    print(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
