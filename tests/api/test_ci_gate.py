"""Acceptance: a CI job played end to end. The example agent's suite runs twice against a live Clear over OTLP/HTTP
(release A with `--bugs none`, release B with the misroute bug), a real Celery worker judges the traces with the
rule judges and the demo's BUGS.md rubrics (no LLM) and builds the insights, and `clearctl gate` — the installed
console script, as CI would run it — fails B against A naming the new insight, and passes A against itself."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from clear.cli_gate import md_escape
from diagnosis.services.rubrics import rubric_create_demo_set
from diagnosis.models import DiagnosisRun, Insight
from traces.models import Trace

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
ROUTING_RUBRIC = "Refund requests are routed to billing"


def _clearctl() -> list[str]:
    script = Path(sys.executable).parent / "clearctl"
    return [str(script)] if script.exists() else [shutil.which("clearctl") or sys.executable, "-m", "clear.cli"]


def _send_suite(url: str, key: str, release: str, bugs: str) -> None:
    result = subprocess.run([sys.executable, "-m", "examples.support_desk", "run", "--bugs", bugs, "--release",
                             release, "--endpoint", url, "--key", key], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "exported" in result.stdout, result.stdout + result.stderr


def _gate(url: str, key: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLEAR_URL": url, "CLEAR_API_KEY": key}
    return subprocess.run([*_clearctl(), "gate", *args, "--wait", "--timeout", "600", "--interval", "0.5"],
                          env=env, capture_output=True, text=True, timeout=900)


def test_the_gate_fails_a_release_with_a_planted_bug(live_server, celery_worker, project, issued_key, settings,
                                                       tmp_path):
    settings.CLEAR_JUDGE_MODEL = ""
    rubric_create_demo_set(project=project)
    _send_suite(live_server.url, issued_key.secret, "A", "none")
    _send_suite(live_server.url, issued_key.secret, "B", "misroute")
    assert Trace.objects.filter(project=project, release="A").count() == 22
    assert Trace.objects.filter(project=project, release="B").count() == 22

    junit, markdown = tmp_path / "clear.xml", tmp_path / "clear.md"
    result = _gate(live_server.url, issued_key.secret, "--release", "B", "--baseline-release", "A",
                   "--junit", str(junit), "--markdown", str(markdown))
    assert result.returncode == 1, result.stdout + result.stderr
    runs = {run.release: run for run in DiagnosisRun.objects.filter(project=project)}
    assert set(runs) == {"A", "B"}
    assert all((r.status, r.insights_status, r.total_count) == ("succeeded", "done", 22) for r in runs.values())
    assert "[" + "#" * 30 + "]" in result.stderr  # the progress bar

    # The misroute: a pattern at the planner in B's four misrouted refunds and not in A. The gate's runs write no
    # insight (issue 27): it is one of the groups compare found on the runs.
    from diagnosis.services.compare import insights_compare

    assert not Insight.objects.filter(project=project).exists()
    changes = insights_compare(project=project, base_run=runs["A"], head_run=runs["B"]).changes
    new = [c.insight for c in changes["new"]]
    # One problem: the planner's pattern, or the system pattern that holds it (its `nodes`), counted once.
    planner = [c for c in changes["new"]
               if c.insight.node == "planner" or any(n.insight.node == "planner" for n in c.nodes)]
    assert [(c.base.trace_count, c.head.trace_count) for c in planner] == [(0, 4)]
    misroute = planner[0].insight
    assert f"new {len(new)} (max 0)" in result.stdout and misroute.title[:90] in result.stdout

    suite = ET.parse(junit).getroot().find("testsuite")
    failures = {case.get("name"): case.find("failure") for case in suite.iter("testcase")
                if case.find("failure") is not None}
    label = f"[{misroute.level} {misroute.node or 'system'}] {misroute.title}"
    assert failures[label].get("message") == f"new insight: {misroute.title}"
    assert {f"[{i.level} {i.node or 'system'}] {i.title}" for i in new} | {"new and worse insights within limits"} \
        == set(failures)
    text = markdown.read_text()
    assert text.startswith("## Clear gate failed: `B` against `A`")
    assert f"**{md_escape(misroute.title)}**" in text

    # The baseline against itself passes, reusing A's run.
    result = _gate(live_server.url, issued_key.secret, "--release", "A", "--baseline-release", "A",
                   "--junit", str(junit))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout and "reusing" in result.stderr
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "0"
    assert DiagnosisRun.objects.filter(project=project).count() == 2
