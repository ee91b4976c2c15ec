"""The support desk as an evolution target: a standalone git repository Clear's evolution pipeline can patch.

    python -m examples.support_desk make-target-repo DEST [--bugs mediator_race,retry_loop]

DEST gets one commit on branch `main` (fixed author and date, so the same input gives the same
commit sha) holding:

- `support_desk/`: this package as a top-level package, with the chosen faults built into its code
  (see target_source.py) and no import of Clear or `examples`;
- `grading/`: `grade.py` (re-checks a trial's answer against `tasks.json`, ignoring the agent's
  self-reported score), `suite.py` (the regression suite), `tasks.json` (what each answer must and
  must not mention);
- `tests/`: fast unit tests that pass with any fault built in;
- `evolution.json`: the target configuration (editable and denied paths, commands, budgets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .config import BugSwitches
from .tasks import LEAK_MARKERS, TASKS
from .target_source import TargetRepoError, target_source

__all__ = ["DEFAULT_TARGET_BUGS", "EVOLUTION_CONFIG", "TargetRepoError", "target_repo_make"]

PACKAGE_DIR = Path(__file__).resolve().parent
FILES_DIR = PACKAGE_DIR / "target_files"
# Modules that make targets; the target itself does not carry them.
EXAMPLE_ONLY = {"target_repo.py", "target_source.py"}

# Release v2 of the demo: misroute fixed, the other two faults still in. misroute's tasks then
# pass at baseline, so a candidate that breaks them shows up as a regression.
DEFAULT_TARGET_BUGS = "mediator_race,retry_loop"

EVOLUTION_CONFIG: dict[str, Any] = {
    "editable_paths": ["support_desk/**"],
    "denied_paths": ["grading/**", "tests/**", "evolution.json", "pytest.ini", ".gitignore"],
    "install_command": "",
    # The example's tests need no pytest plugin; the venv it runs in (Clear's) may hold many (pytest-django, xdist…),
    # whose loading took 1.6 of the run's 1.8 s.
    "test_command": "env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q tests",
    "trial_command": "python -m support_desk run-task --task {task_id} --seed {seed} --out {out}/result.json",
    "grader_command": "python grading/grade.py --out {out} --task {task_id}",
    "health_command": "python -m support_desk health",
    "suite_command": "python grading/suite.py",
    "diff_budget": {"max_files": 10, "max_lines": 400},
    "sandbox_levels": ["bwrap", "subprocess"],
    "trial_timeout_s": 60,
    "trials": 2,
    # Hot-swap mode: releases are staged under Clear's releases root; `serve` runs from the release `current`
    # points at and keeps a heartbeat in the root's heartbeat/ (../../ of a release), the one place outside its release it may write.
    "hot_swap": {
        "activator": {"kind": "process", "command": "python -m support_desk serve --heartbeat ../../heartbeat/beat"},
        "preflight_commands": ["python -c 'import support_desk'"],
        "probes": [
            {"kind": "command", "command": "python -m support_desk health", "timeout_s": 30},
            {"kind": "process_alive"},
            {"kind": "heartbeat", "path": "heartbeat/beat", "max_age_s": 30},
        ],
        "health": {"interval_s": 5, "window_s": 90, "passes_required": 3},
        "keep_releases": 5,
    },
    # Scripts of Clear's scripted backend for this target (examples/support_desk/evolution/, relative to Clear's
    # root), offered on the Evolve form: the fix first, then the fix that breaks routing.
    "scripted_fixtures": ["examples/support_desk/evolution/mediator_race_fix.json",
                          "examples/support_desk/evolution/mediator_race_breaks_misroute.json"],
}

GIT_AUTHOR = ("support-desk", "support-desk@example.invalid")
GIT_DATE = "2025-01-06T09:00:00+00:00"


def _package_files() -> dict[str, str]:
    paths = sorted([*PACKAGE_DIR.glob("*.py"), *PACKAGE_DIR.glob("agents/*.py")])
    return {
        path.relative_to(PACKAGE_DIR).as_posix(): path.read_text(encoding="utf-8")
        for path in paths
        if path.name not in EXAMPLE_ONLY
    }


def _grading_tasks() -> str:
    document = {
        "leak_markers": list(LEAK_MARKERS),
        "tasks": [
            {"task_id": t.task_id, "must_contain": list(t.must_contain), "must_not_contain": list(t.must_not_contain)}
            for t in TASKS
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def target_repo_files(*, bugs: str | BugSwitches = DEFAULT_TARGET_BUGS) -> dict[str, str]:
    """Every file of the target repository (relative path -> text), without writing anything."""
    enabled = frozenset(BugSwitches.parse(bugs).enabled)
    files = {f"support_desk/{path}": text for path, text in target_source(_package_files(), bugs=enabled).items()}
    for template in ("README.md", "pytest.ini", "grading/grade.py", "grading/suite.py", "tests/test_desk.py"):
        files[template] = (FILES_DIR / template).read_text(encoding="utf-8")
    files[".gitignore"] = (FILES_DIR / "gitignore").read_text(encoding="utf-8")
    files["grading/tasks.json"] = _grading_tasks()
    files["evolution.json"] = json.dumps(EVOLUTION_CONFIG, indent=2) + "\n"
    return files


def _git(dest: Path, *args: str) -> str:
    name, email = GIT_AUTHOR
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(dest),
        "LANG": "C.UTF-8",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
    }
    if shutil.which("git", path=env["PATH"]) is None:
        raise TargetRepoError("git is not installed; install git to make a target repository")
    completed = subprocess.run(
        ["git", *args], cwd=dest, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if completed.returncode != 0:
        raise TargetRepoError(f"git {' '.join(args)} failed in {dest}: {completed.stderr.strip()}")
    return completed.stdout.strip()


def target_repo_make(*, dest: Path, bugs: str | BugSwitches | None = None) -> str:
    """Write the target repository at `dest` (created; must be absent or empty) and return its commit sha.

    `bugs` None means DEFAULT_TARGET_BUGS.
    """
    bugs = DEFAULT_TARGET_BUGS if bugs is None else bugs
    dest = Path(dest).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TargetRepoError(f"{dest} already exists and is not an empty directory; pick a new path")
    files = target_repo_files(bugs=bugs)
    dest.mkdir(parents=True, exist_ok=True)
    for relative, text in files.items():
        path = dest / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _git(dest, "init", "--quiet", "--initial-branch=main")
    _git(dest, "add", "--all")
    # The message names no fault: the coding agent can read the history.
    _git(dest, "commit", "--quiet", "--no-gpg-sign", "-m", "support desk")
    return _git(dest, "rev-parse", "HEAD")
