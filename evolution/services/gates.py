"""The automated hard gates of evolution.md §6.1, run in CHECKING before any trial: paths, diff budget, new
dependencies, secrets, install, tests with no new failures against the baseline run."""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evolution import git

DEPENDENCY_FILES = (
    "requirements*.txt", "requirements/*.txt", "pyproject.toml", "setup.py", "setup.cfg", "Pipfile", "Pipfile.lock",
    "poetry.lock", "uv.lock", "package.json", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "go.mod", "go.sum",
    "Cargo.toml", "Cargo.lock", "Gemfile", "Gemfile.lock",
)
TEST_FILES = ("tests/**", "test/**", "**/test_*.py", "test_*.py", "**/*_test.py", "**/conftest.py", "conftest.py")
SECRET_PATTERNS = {
    "private key": re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"),
    "AWS access key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    "OpenAI-style key": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
    "Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    "credential assignment": re.compile(
        r"""(?i)\b(?:password|passwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)\b"""
        r"""\s*[:=]\s*['"][^'"\s]{8,}['"]"""),
}
FAILED_TEST = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass
class Gate:
    name: str
    passed: bool | None  # None: not run (an earlier gate failed)
    value: object = None
    threshold: object = None
    detail: str = ""
    offending: list = field(default_factory=list)


def glob_match(path: str, pattern: str) -> bool:
    """fnmatch with `**` spanning directories and `dir/**` matching everything under dir."""
    if pattern.endswith("/**") and (path == pattern[:-3] or path.startswith(pattern[:-2])):
        return True
    if fnmatch.fnmatchcase(path, pattern):
        return True
    return "**/" in pattern and fnmatch.fnmatchcase(path, pattern.replace("**/", ""))


def _any(path: str, patterns) -> bool:
    return any(glob_match(path, p) for p in patterns)


def gate_paths(*, changes, config: dict) -> Gate:
    denied = [c.path for c in changes if _any(c.path, config["denied_paths"])]
    outside = [c.path for c in changes if not _any(c.path, config["editable_paths"]) and c.path not in denied]
    tests_touched = [c.path for c in changes if c.status != "added" and _any(c.path, TEST_FILES)
                     and not _any(c.path, config["editable_paths"])]
    offending = sorted(set(denied + outside + tests_touched))
    parts = []
    if denied:
        parts.append(f"denied paths changed: {', '.join(denied)}")
    if outside:
        parts.append(f"outside editable_paths {config['editable_paths']}: {', '.join(outside)}")
    if tests_touched:
        parts.append(f"existing tests modified or deleted: {', '.join(tests_touched)}")
    return Gate("paths", not offending, value=len(offending), threshold=0, detail="; ".join(parts) or "ok",
                offending=offending)


def gate_diff_budget(*, changes, worktree: Path, config: dict) -> Gate:
    budget = config["diff_budget"]
    lines = sum(c.added + c.deleted for c in changes)
    binary = [c.path for c in changes if c.binary]
    executables = [c.path for c in changes if c.status == "added" and (worktree / c.path).is_file()
                   and os.access(worktree / c.path, os.X_OK)]
    problems = []
    if len(changes) > budget["max_files"]:
        problems.append(f"{len(changes)} files changed > {budget['max_files']}")
    if lines > budget["max_lines"]:
        problems.append(f"{lines} lines changed > {budget['max_lines']}")
    if binary:
        problems.append(f"binary files: {', '.join(binary)}")
    if executables:
        problems.append(f"new executables: {', '.join(executables)}")
    return Gate("diff_budget", not problems, value={"files": len(changes), "lines": lines}, threshold=budget,
                detail="; ".join(problems) or "ok", offending=binary + executables)


def gate_dependencies(*, changes, config: dict) -> Gate:
    touched = [c.path for c in changes if _any(c.path, DEPENDENCY_FILES) or _any(Path(c.path).name, DEPENDENCY_FILES)]
    allowed = config.get("allow_dependency_changes", False)
    return Gate("dependencies", allowed or not touched, value=touched, threshold="none",
                detail=(f"dependency manifests changed: {', '.join(touched)}" if touched else "ok")
                + (" (allowed by allow_dependency_changes)" if touched and allowed else ""), offending=touched)


def added_lines(diff: str) -> list[tuple[str, str]]:
    current, lines = "", []
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else line[4:]
        elif line.startswith("+") and not line.startswith("+++"):
            lines.append((current, line[1:]))
    return lines


def gate_secrets(*, diff: str) -> Gate:
    hits = []
    for path, line in added_lines(diff):
        for name, pattern in SECRET_PATTERNS.items():
            if pattern.search(line):
                hits.append(f"{path}: {name}")
    return Gate("secrets", not hits, value=len(hits), threshold=0, detail="; ".join(hits) or "ok", offending=hits)


def failed_tests(output: str) -> set[str]:
    return set(FAILED_TEST.findall(output))


def gate_tests(*, baseline: dict | None, exit_code: int | None, timed_out: bool, output: str) -> Gate:
    """No new failures against the baseline run (a suite already red at baseline may stay as red, not redder)."""
    failures = failed_tests(output)
    if timed_out:
        return Gate("tests", False, value="timed out", detail="the test command timed out")
    if exit_code == 0:
        return Gate("tests", True, value=0, threshold="no new failures", detail="all tests passed")
    if not baseline or baseline.get("exit_code") == 0:
        return Gate("tests", False, value=sorted(failures) or exit_code, threshold="no new failures",
                    detail=f"tests fail (exit {exit_code}) where the baseline passed: {', '.join(sorted(failures))}"
                    , offending=sorted(failures))
    new = failures - set(baseline.get("failures", []))
    if not failures and exit_code != baseline.get("exit_code"):
        return Gate("tests", False, value=exit_code, detail=f"test command exit {exit_code}, baseline "
                    f"{baseline.get('exit_code')}, and no failing test names to compare")
    return Gate("tests", not new, value=sorted(new), threshold="no new failures",
                detail=f"new failures: {', '.join(sorted(new))}" if new else "no new failures vs baseline",
                offending=sorted(new))


def gates_static(*, worktree: Path, base: str, candidate: str, config: dict) -> tuple[list[Gate], str]:
    changes = git.commit_diff_stats(repo_path=worktree, base=base, head=candidate)
    diff = git.commit_diff(repo_path=worktree, base=base, head=candidate)
    return [gate_paths(changes=changes, config=config), gate_diff_budget(changes=changes, worktree=worktree,
            config=config), gate_dependencies(changes=changes, config=config), gate_secrets(diff=diff)], diff


def gates_report(gates: list[Gate]) -> list[dict]:
    return [asdict(g) for g in gates]
