"""tests/support/repeat.py, the plugin behind `scripts/test.sh --repeat N` (issue 44), on a tiny test file run by a
pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TESTS = '''
from pathlib import Path

import pytest

RUNS = Path(__file__).with_name("runs.txt")


def test_fails_on_its_second_run():
    with RUNS.open("a") as runs:
        runs.write("x")
    assert len(RUNS.read_text()) != 2


@pytest.mark.parametrize("n", [1, 2])
def test_named_by_run(request, n):
    assert not (n == 2 and request.node.name.endswith("repeat-3]"))


def test_not_repeated():
    pass
'''


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_tiny.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider",
                           "-p", "tests.support.repeat", "-v", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_test_that_fails_on_its_second_run_is_reported_as_run_2(tmp_path):
    result = _pytest(tmp_path, "-p", "no:xdist", "--repeat-count", "4",
                     "--repeat-id", "test_tiny.py::test_fails_on_its_second_run", "test_tiny.py")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    # Run 1 is the original, runs 2-4 the copies, right after it; the other tests run once.
    order = [line.split(" ")[0] for line in out.splitlines()
             if line.startswith("test_tiny.py::") and ("PASSED" in line or "FAILED" in line)]
    assert order == ["test_tiny.py::test_fails_on_its_second_run",
                     *[f"test_tiny.py::test_fails_on_its_second_run[repeat-{k}]" for k in (2, 3, 4)],
                     "test_tiny.py::test_named_by_run[1]", "test_tiny.py::test_named_by_run[2]",
                     "test_tiny.py::test_not_repeated"], out
    summary = out.split("repeated tests (4 runs each)", 1)[1].split("short test summary info", 1)[0]
    failed = [line for line in summary.splitlines() if line.startswith("FAILED test_tiny")]
    assert len(failed) == 1 and failed[0].startswith(
        "FAILED test_tiny.py::test_fails_on_its_second_run run 2 of 4 (call) in "), summary
    assert "test_tiny.py::test_fails_on_its_second_run: passed 3 of 4" in summary
    assert "test_not_repeated" not in summary


def test_copies_run_on_xdist_workers_and_the_controller_reports_them(tmp_path):
    pytest.importorskip("xdist")
    result = _pytest(tmp_path, "-n", "2", "--repeat-count", "3", "--repeat-id", "test_tiny.py::test_named_by_run",
                     "test_tiny.py::test_named_by_run", "test_tiny.py::test_not_repeated")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "1 failed, 6 passed" in out, out  # 2 parameters x 3 runs, and the test run once
    summary = out.split("repeated tests (3 runs each)", 1)[1].split("short test summary info", 1)[0]
    assert [line for line in summary.splitlines() if line.startswith("FAILED test_tiny")][0].startswith(
        "FAILED test_tiny.py::test_named_by_run[2] run 3 of 3 (call) in "), summary
    assert "test_tiny.py::test_named_by_run[1]: passed 3 of 3" in summary
    assert "test_tiny.py::test_named_by_run[2]: passed 2 of 3" in summary


def test_an_id_that_matches_nothing_is_an_error(tmp_path):
    result = _pytest(tmp_path, "-p", "no:xdist", "--repeat-count", "2", "--repeat-id", "test_tiny.py::test_gone",
                     "test_tiny.py")
    assert result.returncode == 4 and "no collected test matches test_tiny.py::test_gone" in result.stderr, \
        result.stdout + result.stderr
