"""The support desk as an evolution target: the repository make-target-repo writes, its commands run the way the
evolution pipeline runs them (clean environment, shlex-split templates, grader from the base commit), and the
scripted fixtures really fix mediator_race (and, in the second fixture, also break misroute's tasks)."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evolution.backends import Access, Role, RoleRequest, backend_get
from evolution.backends.schemas import ROLE_SCHEMAS, output_validate
from examples.support_desk import TASKS, run_suite
from examples.support_desk.target_repo import EVOLUTION_CONFIG, target_repo_make

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "examples" / "support_desk" / "evolution"
ALL_TASK_IDS = [task.task_id for task in TASKS]
MEDIATOR_RACE = {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"}
RETRY_LOOP = {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"}
MISROUTE = {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"}
# The demo's traces: release v1 ran seed 0, v2 seed 1; an insight's failing traces carry these seeds.
SEEDS = (0, 1)


def clean_env(home: Path) -> dict[str, str]:
    """What the sandbox gives a command: no Clear settings, the venv's python first on PATH."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def command(template: str, **values: object) -> list[str]:
    """Split first, then fill each word: the pipeline's rendering, so no value can add or split arguments."""
    return [word.format(**{key: str(value) for key, value in values.items()}) for word in shlex.split(template)]


def sh(args: list[str], *, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=clean_env(home), capture_output=True, text=True, timeout=120)


def git(repo: Path, *args: str) -> str:
    env = {**clean_env(repo), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    completed = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return completed.stdout


ROLE_ORDER = (Role.LOCATOR, Role.PLANNER, Role.PLAN_REVIEWER, Role.IMPLEMENTER, Role.CODE_REVIEWER)


def scripted_play(script: dict, worktree: Path, log_dir: Path) -> dict[Role, dict]:
    """Every role of one iteration through the real ScriptedBackend, as the orchestrator calls it."""
    backend = backend_get(name="scripted", config={"script": script})
    outputs = {}
    for role in ROLE_ORDER:
        access = Access.READ_WRITE if role is Role.IMPLEMENTER else Access.READ_ONLY
        before = git(worktree, "status", "--porcelain")
        result = backend.run_role(RoleRequest(
            role=role, iteration=1, round=0, system_prompt=f"you are the {role}", user_input="mediator_race insight",
            workdir=worktree, access=access, output_schema=ROLE_SCHEMAS[role], timeout_s=30, log_dir=log_dir,
        ))
        assert result.exit_code == 0, result.error
        assert output_validate(output=result.output, schema=ROLE_SCHEMAS[role]) == []
        if access is Access.READ_ONLY:
            assert git(worktree, "status", "--porcelain") == before
        outputs[role] = result.output
    return outputs


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def entry(script: dict, role: str) -> dict:
    (found,) = [item for item in script["entries"] if item["role"] == role]
    return found


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("target") / "support_desk"
    target_repo_make(dest=repo)
    return repo


def candidate(base: Path, tmp_path: Path, fixture: str | None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    worktree = tmp_path / "candidate"
    git(tmp_path, "clone", "--quiet", str(base), str(worktree))
    if fixture is not None:
        scripted_play(load_fixture(fixture), worktree, tmp_path / "logs")
    return worktree


def trial_results(label: str, worktree: Path, base: Path, tmp_path: Path, tasks: list[tuple[str, int]]) -> dict:
    """(task_id, seed) -> passed, running trial_command in the worktree and grader_command in the base."""

    def one(task: tuple[str, int]) -> bool:
        task_id, seed = task
        out = tmp_path / "out" / label / f"{task_id}-{seed}"
        out.mkdir(parents=True)
        trial = sh(command(EVOLUTION_CONFIG["trial_command"], task_id=task_id, seed=seed, out=out), cwd=worktree,
                   home=tmp_path)
        assert trial.returncode == 0, trial.stderr
        graded = sh(command(EVOLUTION_CONFIG["grader_command"], task_id=task_id, out=out), cwd=base, home=tmp_path)
        assert graded.returncode == 0, graded.stderr
        verdict = json.loads(graded.stdout)
        assert set(verdict) == {"score", "passed", "reasons"} and 0 <= verdict["score"] <= 1
        assert verdict["passed"] == (verdict["score"] == 1) == (not verdict["reasons"])
        return verdict["passed"]

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(tasks, pool.map(one, tasks), strict=True))


def failing(results: dict) -> set[str]:
    return {task_id for (task_id, _), passed in results.items() if not passed}


def test_target_repository_layout_and_commit(base: Path, tmp_path: Path) -> None:
    assert git(base, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    author_and_subject = git(base, "log", "--format=%an <%ae> %s").strip()
    assert author_and_subject == "support-desk <support-desk@example.invalid> support desk"
    assert git(base, "status", "--porcelain") == ""
    tracked = set(git(base, "ls-files").split())
    assert {"evolution.json", "grading/grade.py", "grading/suite.py", "grading/tasks.json", "tests/test_desk.py",
            "support_desk/__main__.py", "support_desk/agents/mediator.py"} <= tracked
    # Neither the fault catalogue nor the target-making code travels with the target.
    assert not any(path.endswith("BUGS.md") or "target_" in path for path in tracked)
    assert json.loads((base / "evolution.json").read_text()) == EVOLUTION_CONFIG

    # Same input, same commit: the author, date and content are fixed.
    again = tmp_path / "again"
    assert target_repo_make(dest=again) == git(base, "rev-parse", "HEAD").strip()


def test_target_package_imports_only_itself_stdlib_and_opentelemetry(base: Path) -> None:
    allowed = set(sys.stdlib_module_names) | {"opentelemetry", "__future__"}
    for path in (base / "support_desk").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for marker in ("examples", "BugSwitches", "config.bugs", "mediator_race", "misroute", "retry_loop"):
            assert marker not in text, f"{path}: {marker}"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                assert module.split(".")[0] in allowed, f"{path}: imports {module}"


@pytest.mark.parametrize("bugs", ["none", "all", "mediator_race", "retry_loop", "misroute", None])
def test_target_with_faults_built_in_behaves_like_the_switches(bugs: str | None, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    target_repo_make(dest=repo, bugs=bugs)
    dump = (
        "import json, sys; from support_desk import run_suite; "
        "print(json.dumps([r.as_json_dict() for seed in (0, 3) for r in run_suite(seed=seed)]))"
    )
    completed = sh([sys.executable, "-c", dump], cwd=repo, home=tmp_path)
    assert completed.returncode == 0, completed.stderr
    switches = bugs or "mediator_race,retry_loop"
    expected = [r.as_json_dict() for seed in (0, 3) for r in run_suite(bugs=switches, seed=seed)]
    actual = json.loads(completed.stdout)
    for row in (*expected, *actual):
        row.pop("trace_id")
    assert actual == expected
    # Whichever faults are built in, the unit tests pass at baseline: they are a gate, not a judge of the faults.
    tests = sh(command(EVOLUTION_CONFIG["test_command"]), cwd=repo, home=tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_health_tests_and_suite_commands(base: Path, tmp_path: Path) -> None:
    health = sh(command(EVOLUTION_CONFIG["health_command"]), cwd=base, home=tmp_path)
    assert health.returncode == 0 and "healthy" in health.stdout, health.stderr
    tests = sh(command(EVOLUTION_CONFIG["test_command"]), cwd=base, home=tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout
    suite = sh(command(EVOLUTION_CONFIG["suite_command"]), cwd=base, home=tmp_path)
    assert suite.returncode == 0, suite.stderr
    entries = json.loads(suite.stdout)
    assert [item["task_id"] for item in entries] == ALL_TASK_IDS
    assert all(isinstance(item["seed"], int) for item in entries)
    assert git(base, "status", "--porcelain") == "", "running the commands must leave the tree clean"


def test_health_fails_when_the_canary_breaks(base: Path, tmp_path: Path) -> None:
    worktree = candidate(base, tmp_path, None)
    planner = worktree / "support_desk" / "agents" / "planner.py"
    planner.write_text(planner.read_text().replace('"order_status": "orders_worker"', '"order_status": "kb_worker"'))
    health = sh(command(EVOLUTION_CONFIG["health_command"]), cwd=worktree, home=tmp_path)
    assert health.returncode == 1 and "order-status-shipped" in health.stderr


def test_grader_ignores_the_agents_self_report(base: Path, tmp_path: Path) -> None:
    def grade(task_id: str, result: object | None) -> tuple[int, dict | None, str]:
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        if result is not None:
            (out / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
        completed = sh(command(EVOLUTION_CONFIG["grader_command"], task_id=task_id, out=out), cwd=base,
                       home=tmp_path)
        return completed.returncode, json.loads(completed.stdout) if completed.stdout else None, completed.stderr

    boasting = {"task_id": "two-orders-status", "score": 1.0, "outcome": "success", "answer": "O-5011 has shipped."}
    code, verdict, _ = grade("two-orders-status", boasting)
    assert code == 0 and verdict["passed"] is False and verdict["score"] < 1
    assert "fails: mentions 'O-5010'" in verdict["reasons"]

    honest = dict(boasting, score=0.0, outcome="failure",
                  answer="O-5010 is being processed. O-5011 has shipped.")
    assert grade("two-orders-status", honest)[1] == {"score": 1.0, "passed": True, "reasons": []}
    leaking = dict(honest, answer=honest["answer"] + " (rate_limited)")
    assert grade("two-orders-status", leaking)[1]["reasons"] == ["fails: does not mention 'rate_limited'"]

    assert grade("two-orders-status", None)[1] == {"score": 0.0, "passed": False,
                                                    "reasons": ["the trial wrote no result.json"]}
    assert grade("two-orders-status", "{not json")[1]["score"] == 0.0
    assert "not 'two-orders-status'" in grade("two-orders-status", dict(honest, task_id="refund-status"))[1][
        "reasons"][0]
    code, _, stderr = grade("no-such-task", honest)
    assert code == 2 and "unknown task 'no-such-task'" in stderr


def test_make_target_repo_command_refuses_a_non_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    for dest, bugs, message in ((tmp_path / "taken", "none", "not an empty directory"),
                                (tmp_path / "new", "mediator_race,oops", "unknown switch(es): oops")):
        completed = subprocess.run(
            [sys.executable, "-m", "examples.support_desk", "make-target-repo", str(dest), "--bugs", bugs],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        )
        assert completed.returncode == 2 and message in completed.stderr
    assert not (tmp_path / "new").exists()
    made = subprocess.run(
        [sys.executable, "-m", "examples.support_desk", "make-target-repo", str(tmp_path / "made")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0 and "branch main at" in made.stdout


@pytest.mark.parametrize("fixture", ["mediator_race_fix.json", "mediator_race_breaks_misroute.json"])
def test_fixture_roles_fit_the_target(fixture: str, base: Path, tmp_path: Path) -> None:
    script = load_fixture(fixture)
    assert {item["role"] for item in script["entries"]} == {
        "locator", "planner", "plan_reviewer", "implementer", "code_reviewer"}
    (cluster,) = entry(script, "locator")["output"]["clusters"]
    assert set(cluster["task_ids"]) == MEDIATOR_RACE
    for evidence in cluster["evidence"]:
        lines = (base / evidence["file"]).read_text().splitlines()
        assert evidence["quote"] in lines[evidence["line"] - 1], evidence
    assert entry(script, "plan_reviewer")["output"]["verdict"] == "APPROVE"
    assert entry(script, "code_reviewer")["output"]["verdict"] == "APPROVE"

    implementer = entry(script, "implementer")
    assert implementer["output"]["status"] == "DONE"
    for edit in implementer["edits"]:
        assert any(fnmatch.fnmatch(edit["path"], pattern) for pattern in EVOLUTION_CONFIG["editable_paths"])
        assert not any(fnmatch.fnmatch(edit["path"], pattern) for pattern in EVOLUTION_CONFIG["denied_paths"])
    worktree = candidate(base, tmp_path, fixture)
    prompts = [json.loads(line) for line in (tmp_path / "logs" / "prompts.jsonl").read_text().splitlines()]
    assert [prompt["role"] for prompt in prompts] == [str(role) for role in ROLE_ORDER]
    numstat = [line.split("\t") for line in git(worktree, "diff", "--numstat").splitlines()]
    budget = EVOLUTION_CONFIG["diff_budget"]
    assert 0 < len(numstat) <= budget["max_files"]
    assert sum(int(added) + int(deleted) for added, deleted, _ in numstat) <= budget["max_lines"]
    # The unit tests do not see either change: a regression has to be caught by the trials.
    tests = sh(command(EVOLUTION_CONFIG["test_command"]), cwd=worktree, home=tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert sh(command(EVOLUTION_CONFIG["health_command"]), cwd=worktree, home=tmp_path).returncode == 0


def test_scripted_fix_fixes_the_targets_and_the_breaking_patch_regresses_misroute(base: Path, tmp_path: Path) -> None:
    everything = [(task_id, seed) for task_id in ALL_TASK_IDS for seed in SEEDS]
    baseline = trial_results("baseline", base, base, tmp_path, everything)
    # retry_loop is built into the target too; misroute is not, so its tasks pass at baseline.
    assert failing(baseline) == MEDIATOR_RACE | RETRY_LOOP
    assert all(not baseline[(task_id, seed)] for task_id in MEDIATOR_RACE for seed in SEEDS)

    fixed_tree = candidate(base, tmp_path / "fix", "mediator_race_fix.json")
    fixed = trial_results("fixed", fixed_tree, base, tmp_path, everything)
    assert failing(fixed) == RETRY_LOOP
    assert {task: passed for task, passed in fixed.items() if task[0] not in MEDIATOR_RACE} == {
        task: passed for task, passed in baseline.items() if task[0] not in MEDIATOR_RACE}

    broken_tree = candidate(base, tmp_path / "break", "mediator_race_breaks_misroute.json")
    # The routing change touches refunds only; the fixed arm already covered every other task.
    checked = [(task_id, seed) for task_id in sorted(MEDIATOR_RACE | MISROUTE | {"refund-duplicate-charge"})
               for seed in SEEDS]
    broken = trial_results("broken", broken_tree, base, tmp_path, checked)
    assert failing(broken) == MISROUTE
    assert all(broken[(task_id, seed)] for task_id in MEDIATOR_RACE for seed in SEEDS)
