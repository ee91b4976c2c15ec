"""`clearctl gate` against a live server (Celery eager: runs and insights finish within the requests): new insights
fail the gate and are named in the JUnit XML and the Markdown summary; runs are reused; every error is exit 2 with a
message that says what to fix. The end-to-end CI job (real worker, OTLP): test_ci_gate.py."""

import xml.etree.ElementTree as ET

import pytest

from clear.cli import main
from clear.cli_gate import md_escape
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.services.runs import judges_resolve
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gate_env(live_server, issued_key, monkeypatch, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    monkeypatch.setenv("CLEAR_URL", live_server.url)
    monkeypatch.setenv("CLEAR_API_KEY", issued_key.secret)
    return live_server


def _new_insights(project, base: DiagnosisRun, head: DiagnosisRun) -> list[Insight]:
    """The gate's runs write no insight (issue 27): what is new is what compare finds in the groups kept on them."""
    from diagnosis.services.compare import insights_compare

    return [c.insight for c in insights_compare(project=project, base_run=base, head_run=head).changes["new"]]


def test_a_new_insight_fails_the_gate_and_is_named(gate_env, project, desk_rubrics, tmp_path, capsys):  # noqa: F811
    support_desk_ingest(project=project, bugs="none", release="A")
    support_desk_ingest(project=project, bugs="misroute", release="B")
    junit, markdown = tmp_path / "clear.xml", tmp_path / "clear.md"
    code = main(["gate", "--release", "B", "--baseline-release", "A", "--junit", str(junit),
                 "--markdown", str(markdown), "--interval", "0.05"])
    out = capsys.readouterr()
    assert code == 1, out
    runs = {r.release: r for r in DiagnosisRun.objects.filter(project=project)}
    assert set(runs) == {"A", "B"} and all(r.insights_status == "done" for r in runs.values())
    new = _new_insights(project, runs["A"], runs["B"])
    assert new and any(i.node == "planner" or i.level == "system" for i in new)  # planner's, or the problem holding it
    assert "FAILED" in out.out and f"new {len(new)} (max 0)" in out.out

    tree = ET.parse(junit).getroot()
    suite = tree.find("testsuite")
    failures = {case.get("name"): case.find("failure") for case in suite.iter("testcase")
                if case.find("failure") is not None}
    for insight in new:
        name = f"[{insight.level} {insight.node or 'system'}] {insight.title}"
        assert name in failures, (name, list(failures))
        assert failures[name].get("message") == f"new insight: {insight.title}"
    assert "new and worse insights within limits" in failures
    assert int(suite.get("failures")) == len(new) + 1
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["head_run"] == str(runs["B"].pk) and properties["base_run"] == str(runs["A"].pk)

    text = markdown.read_text()
    assert text.startswith("## Clear gate failed: `B` against `A`")
    # Patterns of the gate's runs alone are in no list: named, without a link to a page they do not have.
    assert "### New insights" in text and f"/p/{project.slug}/insights/None/" not in text
    assert not Insight.objects.filter(project=project).exists()
    for insight in new:
        assert f"**{md_escape(insight.title)}**" in text

    # A second gate reuses both runs; with the new ones allowed it passes.
    assert main(["gate", "--release", "B", "--baseline-release", "A", "--max-new", str(len(new))]) == 0
    assert DiagnosisRun.objects.filter(project=project).count() == 2
    assert "reusing" in capsys.readouterr().err
    # The baseline against itself: one run, nothing new.
    assert main(["gate", "--release", "A", "--baseline-release", "A", "--junit", str(junit)]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "0"
    # Traces of a release that arrive after its run: a new run judges them.
    support_desk_ingest(project=project, bugs="misroute", release="A", seed=5)
    assert main(["gate", "--release", "A", "--baseline-release", "A"]) in (0, 1)
    assert DiagnosisRun.objects.filter(project=project, release="A").count() == 2


def test_errors_exit_2_with_a_message(gate_env, project, monkeypatch, capsys):
    assert main(["gate", "--release", "nothing", "--baseline-release", "A"]) == 2
    assert "has no traces" in capsys.readouterr().err

    # A run of the release still running (reused): not ready without --wait, a timeout with it.
    support_desk_ingest(project=project, bugs="none", release="R", task_ids=["order-status-shipped"])
    DiagnosisRun.objects.create(project=project, release="R", status=DiagnosisRun.Status.RUNNING, total_count=1,
                                judges=judges_resolve(judges=None, model=""))
    assert main(["gate", "--release", "R", "--baseline-release", "R"]) == 2
    assert "pass --wait" in capsys.readouterr().err
    assert main(["gate", "--release", "R", "--baseline-release", "R", "--wait", "--timeout", "0.3",
                 "--interval", "0.05"]) == 2
    assert "--timeout" in capsys.readouterr().err
    DiagnosisRun.objects.filter(release="R").update(status=DiagnosisRun.Status.FAILED,
                                                     failure_message="the worker died")
    DiagnosisRun.objects.create(project=project, release="R", status=DiagnosisRun.Status.CANCELLED, total_count=1)
    # Failed runs are not reused: a new one is started and judged.
    assert main(["gate", "--release", "R", "--baseline-release", "R"]) == 0
    capsys.readouterr()

    assert main(["gate", "--release", "R", "--baseline-release", "R", "--judges", "nope"]) == 2
    assert "Unknown judge 'nope'" in capsys.readouterr().err
    monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-wrong")
    assert main(["gate", "--release", "R", "--baseline-release", "R"]) == 2
    err = capsys.readouterr().err
    assert "401" in err and "CLEAR_API_KEY" in err
    monkeypatch.setenv("CLEAR_URL", "http://127.0.0.1:9")
    assert main(["gate", "--release", "R", "--baseline-release", "R"]) == 2
    assert "Cannot reach Clear" in capsys.readouterr().err
    monkeypatch.setenv("CLEAR_URL", "not a url")
    assert main(["gate", "--release", "R", "--baseline-release", "R"]) == 2
    assert "CLEAR_URL" in capsys.readouterr().err


@pytest.mark.django_db(transaction=False)
def test_reports_stay_valid_whatever_the_titles_hold():
    import argparse

    from clear.cli_gate import _over, junit_xml, markdown_summary

    title = 'Refund <b>routed</b> | to "orders_worker" \x01\x00 [x](javascript:alert(1))'
    side = {"count": 1, "trace_count": 1, "judged": 2, "frequency": 0.5}
    row = {"id": 7, "level": "node", "node": "planner", "title": title, "severity": "high", "status": "open",
           "review": "unreviewed", "change": "new", "base": {**side, "trace_count": 0, "frequency": 0.0},
           "head": side, "delta": 0.5, "delta_low": 0.1, "delta_high": 0.9, "url": "/api/v1/insights/7/"}
    comparison = {"base": {"id": "b", "judged": 2}, "head": {"id": "h", "judged": 2},
                  "thresholds": {"min_delta": 0.05, "confidence": 0.95, "min_traces": 1},
                  "counts": {"new": 1, "worse": 0, "resolved": 0, "better": 0, "unchanged": 0},
                  "new": [row], "worse": [], "resolved": [], "better": [], "unchanged": []}
    args = argparse.Namespace(release="v`1", baseline_release="main", max_new=0, max_worse=0)
    over = _over(comparison, {"new": 0, "worse": 0})
    suite = ET.fromstring(junit_xml(comparison, args, over)).find("testsuite")
    [case] = [c for c in suite.iter("testcase") if c.get("classname") == "clear.insights.node.planner"]
    assert case.find("failure").get("message").startswith('new insight: Refund <b>routed</b> | to "orders_worker"')
    text = markdown_summary(comparison, args, over)
    assert text.startswith("## Clear gate failed: `v'1` against `main`")
    assert "<b>" not in text and "](javascript" not in text and "\\|" in text


def test_the_gate_counts_each_planted_bug_once(gate_env, project, capsys):
    """Issue 39: on the demo's data (v1 every bug, v2 without the misroute, one full run over both), `gate --release
    v2 --baseline-release v1` lists the misroute once, as resolved: its node patterns of the gate's runs (the planner's
    rubric finding, which no stored node insight matches without the contrastive judge) are under it."""
    from diagnosis.services.rubrics import rubric_create_demo_set
    from tests.diagnosis.insights.conftest import diagnose

    rubric_create_demo_set(project=project)
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    diagnose(project, "")
    assert main(["gate", "--release", "v2", "--baseline-release", "v1", "--interval", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "new 0 (max 0), worse 0 (max 0), resolved 1, better 0, unchanged 2" in out, out
    resolved = [line for line in out.splitlines() if line.strip().startswith("RESOLVED")]
    assert len(resolved) == 1 and "intent: refund" in resolved[0], out


def test_a_release_without_traces_leaves_no_run_behind(gate_env, project, owner, issued_key, capsys):
    """Issue 40: the gate on a release with no traces used to leave a succeeded 0/0 run, which the overview then
    announced as the latest run. The server refuses to start a run of a release with no traces, so none is made."""
    from django.test import Client
    from rest_framework.test import APIClient

    from tests.api.conftest import make_trace

    make_trace(project, release="A")
    make_trace(project, release="A")
    assert main(["runs", "start", "--release", "A", "--judges", "rules", "--wait", "--interval", "0.05"]) == 0
    full = DiagnosisRun.objects.get(project=project)
    capsys.readouterr()

    assert main(["gate", "--release", "v9", "--baseline-release", "A"]) == 2
    err = capsys.readouterr().err
    assert "'v9' has no traces" in err and "service.version=v9" in err, err
    assert list(DiagnosisRun.objects.filter(project=project)) == [full]

    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    for body in ({"release": "v9", "reuse": True, "purpose": "gate"}, {"release": "v9"}):
        response = api.post("/api/v1/runs/", body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "release_without_traces" and "v9" in response.json()["message"]
    response = api.post("/api/v1/runs/", {"release": "A", "outcome": "failure"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "release_filter_empty", response.content
    assert list(DiagnosisRun.objects.filter(project=project)) == [full]

    browser = Client()
    browser.force_login(owner)
    html = browser.get(f"/p/{project.slug}/").content.decode()
    assert 'data-testid="figures-run"' in html and str(full.pk)[:8] in html
    assert "Latest run" not in html and "clearctl gate v9" not in html
