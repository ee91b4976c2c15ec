"""The deterministic verdict (§7.10) and the static hard gates (§6.1), on hand-made inputs."""

from types import SimpleNamespace

from evolution.config import DEPTHS, job_policy_build, target_config_validate
from evolution.services.gates import (
    gate_dependencies, gate_diff_budget, gate_paths, gate_secrets, gate_tests, glob_match,
)
from evolution.services.verdict import TaskResult, cascade_continue, verdict_compute
from tests.evolution.fixture_repo import CONFIG

POLICY = job_policy_build(depth="standard", target_config=target_config_validate(CONFIG), overrides={"trials": 2})
FAIL, PASS = (0.0, False), (1.0, True)


def _task(task_id, kind, baseline, candidate):
    return TaskResult(task_id=task_id, seed=0, kind=kind, baseline=tuple(baseline), candidate=tuple(candidate))


def test_fixing_the_targets_without_regressions_is_promote_eligible():
    results = [_task("t1", "target", [FAIL, FAIL], [PASS, PASS]), _task("t2", "target", [FAIL, FAIL], [PASS, PASS]),
               _task("r1", "regression", [PASS, PASS], [PASS, PASS])]
    verdict = verdict_compute(results=results, gates_passed=True, policy=POLICY)
    assert verdict.decision == "PROMOTE_ELIGIBLE" and verdict.score == 1.0
    assert all(rule["passed"] for rule in verdict.rules)


def test_a_pass_n_to_fail_n_flip_rejects_whatever_the_targets_gain():
    results = [_task("t1", "target", [FAIL, FAIL], [PASS, PASS]),
               _task("r1", "regression", [PASS, PASS], [FAIL, FAIL])]
    verdict = verdict_compute(results=results, gates_passed=True, policy=POLICY)
    assert verdict.decision == "REJECT_REGRESSION" and verdict.score is None
    failed = {rule["name"] for rule in verdict.rules if not rule["passed"]}
    assert failed == {"G2_per_task", "G2_no_flips", "G2_mean_drop"}


def test_flaky_regression_within_tolerance_passes_but_a_stable_one_may_not_drop():
    flaky = [_task("t1", "target", [FAIL, FAIL], [PASS, PASS]),
             _task("r1", "regression", [PASS, FAIL], [FAIL, FAIL]),
             _task("r2", "regression", [PASS, PASS], [PASS, PASS])]
    verdict = verdict_compute(results=flaky, gates_passed=True, policy={**POLICY, "max_regression_drop": 0.5})
    assert verdict.decision == "PROMOTE_ELIGIBLE"
    stable = [_task("t1", "target", [FAIL, FAIL], [PASS, PASS]), _task("r1", "regression", [PASS, PASS], [PASS, FAIL])]
    assert verdict_compute(results=stable, gates_passed=True,
                           policy={**POLICY, "max_regression_drop": 0.5}).decision == "REJECT_REGRESSION"


def test_partial_gain_needs_more_work_and_none_is_no_improvement():
    partial = [_task("t1", "target", [FAIL, FAIL], [PASS, PASS]), _task("t2", "target", [FAIL, FAIL], [FAIL, FAIL]),
               _task("t3", "target", [FAIL, FAIL], [FAIL, FAIL]), _task("r1", "regression", [PASS, PASS], [PASS, PASS])]
    verdict = verdict_compute(results=partial, gates_passed=True, policy=POLICY)
    assert verdict.decision == "NEED_MORE_WORK" and round(verdict.score, 3) == 0.333
    nothing = [_task("t1", "target", [FAIL, FAIL], [FAIL, FAIL]), _task("r1", "regression", [PASS, PASS], [])]
    assert not cascade_continue(results=nothing)
    verdict = verdict_compute(results=nothing, gates_passed=True, policy=POLICY)
    assert verdict.decision == "NO_IMPROVEMENT"
    assert "not run" in next(r for r in verdict.rules if r["name"] == "G2_per_task")["detail"]
    assert verdict_compute(results=partial, gates_passed=False, policy=POLICY).decision == "NO_IMPROVEMENT"


def test_a_reviewer_can_veto_but_never_approve():
    results = [_task("t1", "target", [FAIL, FAIL], [PASS, PASS])]
    assert verdict_compute(results=results, gates_passed=True, policy=POLICY,
                           reviewer_veto="critical: unbounded retry").decision == "NO_IMPROVEMENT"
    worse = [_task("t1", "target", [FAIL, FAIL], [FAIL, FAIL])]
    assert verdict_compute(results=worse, gates_passed=True, policy=POLICY).decision == "NO_IMPROVEMENT"


def _change(path, status="modified", added=1, deleted=1, binary=False):
    return SimpleNamespace(path=path, status=status, added=added, deleted=deleted, binary=binary)


def test_path_gate_denies_paths_outside_or_denied_and_edited_tests():
    config = target_config_validate({**CONFIG, "editable_paths": ["router/**", "tests/new_*.py"]}).model_dump()
    assert gate_paths(changes=[_change("router/agent.py")], config=config).passed
    gate = gate_paths(changes=[_change("grading/grade.py"), _change("setup.py"), _change("tests/test_router.py")],
                      config=config)
    assert not gate.passed and gate.offending == ["grading/grade.py", "setup.py", "tests/test_router.py"]
    assert "denied paths changed: grading/grade.py" in gate.detail and "outside editable_paths" in gate.detail
    assert glob_match("router/sub/deep.py", "router/**") and not glob_match("routerx/a.py", "router/**")
    assert glob_match("pkg/tests/test_a.py", "**/test_*.py") and glob_match("test_a.py", "**/test_*.py")


def test_budget_dependency_and_secret_gates(tmp_path):
    config = target_config_validate(CONFIG).model_dump()
    many = [_change(f"router/m{i}.py", added=30, deleted=0) for i in range(6)]
    gate = gate_diff_budget(changes=many, worktree=tmp_path, config=config)
    assert not gate.passed and "6 files changed > 5" in gate.detail and "180 lines changed > 100" in gate.detail
    (tmp_path / "router").mkdir()
    (tmp_path / "router" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "router" / "run.sh").chmod(0o755)
    gate = gate_diff_budget(changes=[_change("router/run.sh", status="added"), _change("router/x.bin", binary=True)],
                            worktree=tmp_path, config=config)
    assert not gate.passed and gate.offending == ["router/x.bin", "router/run.sh"]
    assert not gate_dependencies(changes=[_change("requirements.txt")], config=config).passed
    assert gate_dependencies(changes=[_change("requirements.txt")],
                             config={**config, "allow_dependency_changes": True}).passed
    diff = ("+++ b/router/agent.py\n+API_KEY = 'sk-abcdefghijklmnopqrstuvwx'\n+x = 1\n"
            "+++ b/router/k.pem\n+-----BEGIN RSA PRIVATE KEY-----\n-password = 'old-removed-value'\n")
    gate = gate_secrets(diff=diff)
    assert not gate.passed and gate.offending == ["router/agent.py: OpenAI-style key",
                                                  "router/agent.py: credential assignment", "router/k.pem: private key"]
    assert gate_secrets(diff="+++ b/a.py\n+token = os.environ['TOKEN']\n").passed


def test_test_gate_compares_with_the_baseline():
    green = {"exit_code": 0, "failures": []}
    red = {"exit_code": 1, "failures": ["tests/test_a.py::test_old"]}
    assert gate_tests(baseline=green, exit_code=0, timed_out=False, output="").passed
    new_failure = "FAILED tests/test_a.py::test_new - assert 1 == 2\n"
    assert not gate_tests(baseline=green, exit_code=1, timed_out=False, output=new_failure).passed
    assert gate_tests(baseline=red, exit_code=1, timed_out=False, output="FAILED tests/test_a.py::test_old\n").passed
    gate = gate_tests(baseline=red, exit_code=1, timed_out=False,
                      output="FAILED tests/test_a.py::test_old\n" + new_failure)
    assert not gate.passed and gate.value == ["tests/test_a.py::test_new"]
    assert not gate_tests(baseline=green, exit_code=None, timed_out=True, output="").passed


def test_depth_tiers_are_the_documented_defaults():
    assert [DEPTHS[d]["max_iterations"] for d in ("shallow", "standard", "deep")] == [2, 3, 5]
    assert [DEPTHS[d]["trials"] for d in ("shallow", "standard", "deep")] == [2, 3, 5]
