"""`manage.py evolution_target` and `manage.py evolution_job`: register a target, run a job from the CLI, approve."""

import json
import re
import subprocess
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evolution.models import EvolutionJob, EvolutionTarget
from tests.evolution.fixture_repo import CONFIG, FIXED_BRANCH, replace_edit
from tests.evolution.support import happy_entries, script_write

pytestmark = pytest.mark.django_db(transaction=True)


def _call(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_target_add_names_every_bad_field(project, router_remote, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**CONFIG, "diff_budget": {"max_lines": -1}, "trial_timeout_s": 0,
                               "grader_command": "python g.py"}))
    with pytest.raises(CommandError) as caught:
        _call("evolution_target", "add", "--project", project.name, "--name", "router", "--source",
              str(router_remote), "--config", str(bad))
    text = str(caught.value)
    for field in ("diff_budget.max_lines", "trial_timeout_s", "grader_command: must contain {out}"):
        assert field in text
    with pytest.raises(CommandError, match="does not exist"):
        _call("evolution_target", "add", "--project", project.name, "--name", "x", "--source", str(tmp_path / "nope"))
    out = _call("evolution_target", "add", "--project", project.name, "--name", "router", "--source",
                str(router_remote))
    assert "Target router" in out and EvolutionTarget.objects.get(name="router").config["trials"] == 2
    assert "router" in _call("evolution_target", "list", "--project", project.name)


def test_a_job_driven_from_the_cli_reaches_a_pull_request(project, owner, router_remote, refund_insight, tmp_path):
    _call("evolution_target", "add", "--project", project.name, "--name", "router", "--source", str(router_remote))
    script = script_write(tmp_path / "script.json", happy_entries(replace_edit(FIXED_BRANCH)))
    out = _call("evolution_job", "start", "--insight", str(refund_insight.pk), "--target", "router", "--backend",
                "scripted", "--script", str(script), "--depth", "shallow", "--policy", '{"trials": 1}', "--inline")
    job = EvolutionJob.objects.get()
    assert job.state == "AWAITING_CONSENT", out
    assert "VERDICT → AWAITING_CONSENT" in out and "PROMOTE_ELIGIBLE" in out
    sha = re.search(r"patch sha256 ([0-9a-f]{64})", out).group(1)
    with pytest.raises(CommandError, match="not the candidate's"):
        _call("evolution_job", "approve", str(job.pk), "--user", owner.email, "--sha256", "f" * 64, "--inline")
    out = _call("evolution_job", "approve", str(job.pk), "--user", owner.email, "--sha256", sha, "--inline")
    job.refresh_from_db()
    assert job.state == "PR_OPENED" and f"evo/{job.pk}/1" in out
    branches = subprocess.run(["git", "--git-dir", str(router_remote), "branch", "--list", "evo/*"],
                              capture_output=True, text=True, check=True).stdout
    assert f"evo/{job.pk}/1" in branches
    with pytest.raises(CommandError, match="needs --script"):
        _call("evolution_job", "start", "--insight", str(refund_insight.pk), "--target", "router")
