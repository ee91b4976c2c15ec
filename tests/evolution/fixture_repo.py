"""A tiny agent repository for the evolution scenarios (evolution.md §7.14): a router that misroutes refunds.

`router.route(message)` sends refund requests to "billing" instead of "refunds". Three target tasks are refund
requests in three phrasings; three regression tasks (billing, account, shipping) pass at baseline. The grader and
the expected queues live under grading/ (denied to the candidate), unit tests under tests/, a health script, and
evolution.json at the root.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

TASKS = {
    # target tasks: refunds, in three phrasings
    "refund-damaged": ("My blender arrived broken, I want a refund", "refunds"),
    "refund-money-back": ("Can I get my money back for order 42?", "refunds"),
    "refund-return": ("I returned the shoes, please process the refund", "refunds"),
    # regression tasks: pass at baseline
    "invoice-copy": ("Please send me a copy of my invoice", "billing"),
    "password-reset": ("I forgot my password and cannot log in", "account"),
    "where-is-order": ("Where is my order? The package is late", "shipping"),
}
TARGET_TASKS = ["refund-damaged", "refund-money-back", "refund-return"]
REGRESSION_TASKS = ["invoice-copy", "password-reset", "where-is-order"]

AGENT = '''\
"""Routes a support message to a queue."""


def route(message: str) -> str:
    text = message.lower()
    if "invoice" in text or "charge" in text or "refund" in text or "money back" in text:
        return "billing"
    if "password" in text or "log in" in text:
        return "account"
    if "order" in text or "package" in text:
        return "shipping"
    return "general"
'''

BUGGY_BRANCH = '''    if "invoice" in text or "charge" in text or "refund" in text or "money back" in text:
        return "billing"
'''
FIXED_BRANCH = '''    if "refund" in text or "money back" in text:
        return "refunds"
    if "invoice" in text or "charge" in text:
        return "billing"
'''
# Fixes one phrasing of three ("money back" still goes to billing, "refund" only when it says "a refund").
PARTIAL_BRANCH = '''    if "a refund" in text:
        return "refunds"
    if "invoice" in text or "charge" in text or "refund" in text or "money back" in text:
        return "billing"
'''
# Fixes the refunds and breaks the shipping queue (which no unit test covers: only the trials see it).
REGRESSING_BRANCH = FIXED_BRANCH + '''    if "package" in text:
        return "general"
'''

MAIN = '''\
"""python -m router run-task --task ID --seed N --out FILE"""

import argparse
import json
import sys
from pathlib import Path

from router.agent import route

INPUTS = json.loads((Path(__file__).parent / "inputs.json").read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="router")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run-task")
    run.add_argument("--task", required=True)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    message = INPUTS[args.task]
    Path(args.out).write_text(json.dumps({"task_id": args.task, "queue": route(message), "trajectory": ["route"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

GRADER = '''\
"""python grading/grade.py --out DIR --task ID: prints {"score", "passed", "reasons"}."""

import argparse
import json
from pathlib import Path

EXPECTED = json.loads((Path(__file__).parent / "expected.json").read_text())

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--task", required=True)
args = parser.parse_args()
result_path = Path(args.out) / "result.json"
if not result_path.is_file():
    print(json.dumps({"score": 0.0, "passed": False, "reasons": ["no result.json"]}))
else:
    result = json.loads(result_path.read_text())
    expected = EXPECTED[args.task]
    ok = result.get("queue") == expected and result.get("trajectory") == ["route"]
    reasons = [] if ok else [f"routed to {result.get('queue')!r}, expected {expected!r}"]
    print(json.dumps({"score": 1.0 if ok else 0.0, "passed": ok, "reasons": reasons}))
'''

SUITE = '''\
import json

print(json.dumps([{"task_id": task, "seed": 0} for task in %r]))
''' % (list(TASKS),)

UNIT_TESTS = '''\
from router.agent import route


def test_invoice_goes_to_billing():
    assert route("Where is my invoice?") == "billing"


def test_password_goes_to_account():
    assert route("I lost my password") == "account"
'''

HEALTH = '''\
import sys

from router.agent import route

sys.exit(0 if route("hello") == "general" else 1)
'''

CONFIG = {
    "editable_paths": ["router/**"],
    "denied_paths": ["grading/**", "tests/**", "evolution.json"],
    "install_command": "",
    # Without the plugins of the venv it runs in (Clear's, with pytest-django, xdist, playwright...): 0.2 s, not 1.8.
    "test_command": "env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider tests",
    "trial_command": "python -m router run-task --task {task_id} --seed {seed} --out {out}/result.json",
    "grader_command": "python grading/grade.py --out {out} --task {task_id}",
    "health_command": "python health.py",
    "suite_command": "python grading/suite.py",
    "diff_budget": {"max_files": 5, "max_lines": 100},
    "sandbox_levels": ["bwrap", "subprocess"],
    "trial_timeout_s": 20,
    "trials": 2,
}


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
           "GIT_COMMITTER_NAME": "fixture", "GIT_COMMITTER_EMAIL": "fixture@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def fixture_repo_make(dest: Path, *, config_overrides: dict | None = None, bare: bool = True) -> Path:
    """Commit the fixture agent into a work repo and return a bare clone of it (the target's source and remote)."""
    work = dest / "work"
    files = {
        "router/__init__.py": "",
        "router/agent.py": AGENT,
        "router/__main__.py": MAIN,
        "router/inputs.json": json.dumps({task: message for task, (message, _) in TASKS.items()}, indent=1),
        "grading/grade.py": GRADER,
        "grading/suite.py": SUITE,
        "grading/expected.json": json.dumps({task: queue for task, (_, queue) in TASKS.items()}, indent=1),
        "tests/test_router.py": UNIT_TESTS,
        "health.py": HEALTH,
        "evolution.json": json.dumps({**CONFIG, **(config_overrides or {})}, indent=2),
        ".gitignore": "__pycache__/\n",
    }
    for relative, text in files.items():
        path = work / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if relative.endswith(".py") else text)
    _git(dest, "init", "-q", "-b", "main", str(work))
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "router agent with the refund misroute")
    if not bare:
        return work
    remote = dest / "remote.git"
    _git(dest, "clone", "-q", "--bare", str(work), str(remote))
    return remote


def replace_edit(new_branch: str) -> dict:
    return {"path": "router/agent.py", "replace": {"old": BUGGY_BRANCH, "new": new_branch}}
