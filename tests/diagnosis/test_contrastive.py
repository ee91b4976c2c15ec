"""The contrastive judge (diagnosis/judges/contrastive.py): features that separate failing from succeeding traces,
from recorded outcomes alone.

The statistics on small synthetic sets (Benjamini–Hochberg, minimum support, direction, one test per trace set,
explaining away), then the acceptance on the demo's data (scripts/demo.sh: the example agent's v1 with every planted
bug, seed 0, and v2 with mediator_race and retry_loop, seed 1): with the rubrics off, each planted bug is exactly one
finding at the node BUGS.md names, holding in exactly the traces of the tasks it touches, and after insights_build
exactly one insight; the decoy tasks carry none.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from scipy.stats import false_discovery_control

from diagnosis.errors import DiagnosisRunInvalidError
from diagnosis.insights.verify import evidence_verified
from diagnosis.judges.contrastive import benjamini_hochberg, contrastive_findings, contrastive_results
from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightStatement
from diagnosis.selectors import diagnosis_run_summary
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from diagnosis.services.contrastive import contrastive_run_judge
from diagnosis.services.insights import insights_build
from diagnosis.services.runs import judges_resolve
from tests.diagnosis.support import span, support_desk_ingest, view
from traces.models import Span, Trace

# examples/support_desk/BUGS.md: the tasks each fault touches and the node whose spans show it.
TOUCHED_BY = {
    "mediator_race": {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"},
    "retry_loop": {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"},
    "misroute": {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"},
}
BUG_NODE = {"mediator_race": "mediator", "retry_loop": "billing_worker", "misroute": "planner"}
# v1 has every bug, v2 all but the misroute: the traces each bug fails.
BUG_RELEASES = {"mediator_race": {"v1", "v2"}, "retry_loop": {"v1", "v2"}, "misroute": {"v1"}}
DECOYS = {"order-not-found", "refund-duplicate-charge", "order-and-invoice"}


# --- statistics on synthetic traces --------------------------------------------------------------------------------

def _trace(trace_id: str, outcome: str, *tools: str, error: str = ""):
    spans = [span(f"s{i}", kind="TOOL", node="worker", at=i, tool_name=tool, name=f"execute_tool {tool}",
                  input={"q": "x"}, output={"ok": True}) for i, tool in enumerate(tools)]
    if error:
        spans.append(span("e", kind="TOOL", node="worker", at=9, tool_name=error, name=f"execute_tool {error}",
                          input={"q": "y"}, status="error", status_message="boom",
                          exceptions=[{"type": "TimeoutError", "message": "boom"}]))
    return replace(view(*spans), trace_id=trace_id, outcome=outcome)


def _set(failing: list[tuple], succeeding: list[tuple]):
    return ([_trace(f"f{i}", "failure", *tools, **extra) for i, (tools, extra) in enumerate(failing)]
            + [_trace(f"s{i}", "success", *tools, **extra) for i, (tools, extra) in enumerate(succeeding)])


def test_benjamini_hochberg_matches_scipy_and_keeps_order():
    p = [0.001, 0.04, 0.03, 0.5, 0.0225, 0.0225, 0.2]
    assert benjamini_hochberg(p) == pytest.approx(list(false_discovery_control(p)))
    assert benjamini_hochberg([0.01]) == [0.01] and benjamini_hochberg([]) == []
    assert benjamini_hochberg([0.04, 0.01]) == pytest.approx([0.04, 0.02])  # step-up: monotone in p


def test_a_feature_of_every_failing_trace_is_found_with_its_numbers():
    traces = _set([(("search", "fetch"), {"error": "fetch"})] * 6, [(("search", "fetch"), {})] * 6)
    report = contrastive_findings(traces)
    assert report.status == "ok" and (report.failing, report.succeeding) == (6, 6)
    (finding,) = report.findings
    # "fetch fails" and "fetch fails with TimeoutError" hold in the same traces: one hypothesis, the typed one named
    assert finding.statement == "fails 100% vs 0% when `fetch` fails with `TimeoutError`"
    assert finding.title == "Fails more often when `fetch` fails with `TimeoutError`"
    assert finding.detail.startswith(finding.statement + "; in 6 of 6 failing and 0 of 6 succeeding traces")
    assert finding.node == "worker" and (finding.failing_with, finding.succeeding_with) == (6, 0)
    assert "error|worker|fetch" in finding.equivalent
    assert finding.p_value == pytest.approx(1 / 924)  # one-sided Fisher: C(6,6)·C(6,0) / C(12,6)
    assert finding.q_value >= finding.p_value
    results = contrastive_results(report)
    assert set(results) == {f"f{i}" for i in range(6)}
    (result,) = results["f0"]
    assert result.verdict == "fail" and result.target_span_id == "e" and result.judge == "contrastive"
    assert result.issues[0].evidence[0].span_id == "e" and result.issues[0].evidence[0].quote == "TimeoutError"


def test_minimum_support_counts_failing_traces():
    # Two failing traces with the error and none succeeding: below the default support of 3, nothing is tested.
    traces = _set([(("a",), {"error": "b"})] * 2 + [(("a",), {})] * 4, [(("a",), {})] * 8)
    assert contrastive_findings(traces).tested == 0
    assert contrastive_findings(traces, min_support=2).tested == 1


def test_only_features_more_frequent_in_failures_are_tested():
    # "rare" is in 3 of 10 failing and 6 of 10 succeeding traces: odds ratio < 1, not tested, never a finding; its
    # absence ("a" called without "rare": 7 of 10 failing, 4 of 10 succeeding) is the one hypothesis tested.
    traces = _set([(("a", "rare"), {})] * 3 + [(("a",), {})] * 7, [(("a", "rare"), {})] * 6 + [(("a",), {})] * 4)
    report = contrastive_findings(traces, fdr=1.0)
    assert report.tested == 1
    assert [(f.key, f.failing_with, f.succeeding_with) for f in report.findings] == [("without|a|rare", 7, 4)]


def test_benjamini_hochberg_rejects_what_a_single_test_would_keep():
    # One tool in 3 of 5 failing traces and in no succeeding one: p = 1/C(10,3)·C(5,3) ≈ 0.083 alone.
    traces = _set([(("a", "x"), {})] * 3 + [(("a",), {})] * 2, [(("a",), {})] * 5)
    report = contrastive_findings(traces, fdr=0.1)
    (finding,) = report.findings
    assert finding.p_value == pytest.approx(10 / 120) and finding.q_value == pytest.approx(finding.p_value)
    assert not contrastive_findings(traces, fdr=0.05).findings


def test_a_narrower_view_of_a_kept_pattern_is_explained_away():
    # "x" fails 8 traces; "y" is called in 4 of them only, also never in a success: the same failures, seen narrower.
    failing = [(("a", "x", "y"), {})] * 4 + [(("a", "x"), {})] * 4
    traces = _set(failing, [(("a",), {})] * 8)
    (finding,) = contrastive_findings(traces).findings
    assert "calls|worker|x" in [finding.key, *finding.equivalent]
    assert finding.traces == {f"f{i}" for i in range(8)}


def test_too_few_outcomes_skip_with_a_reason():
    traces = _set([(("a",), {})] * 2, [(("a",), {})] * 9)
    report = contrastive_findings(traces)
    assert report.status == "skipped" and "2 failing and 9 succeeding" in report.reason
    unknown = [replace(t, outcome=None) for t in traces]
    assert "0 failing and 0 succeeding (11 without an outcome)" in contrastive_findings(unknown).reason


def test_default_judges_include_contrastive_and_explicit_lists_are_kept():
    assert judges_resolve(judges=None, model="")[-1] == "contrastive"
    assert "contrastive" not in judges_resolve(judges=["rules"], model="")
    assert judges_resolve(judges=["contrastive"], model="") == ["contrastive"]
    with pytest.raises(DiagnosisRunInvalidError, match="contrastive"):
        judges_resolve(judges=["contrast"], model="")


# --- acceptance on the demo's data ------------------------------------------------------------------------------

@pytest.fixture
def demo(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    return project


def _expected_traces(project, bug: str) -> set[str]:
    return set(Trace.objects.filter(project=project, task_id__in=TOUCHED_BY[bug], release__in=BUG_RELEASES[bug])
               .values_list("trace_id", flat=True))


def _bug_of(project, trace_ids: set[str]) -> str | None:
    tasks = set(Trace.objects.filter(project=project, trace_id__in=trace_ids).values_list("task_id", flat=True))
    bugs = {bug for bug, touched in TOUCHED_BY.items() if tasks & touched}
    return bugs.pop() if len(bugs) == 1 and tasks <= TOUCHED_BY[next(iter(bugs))] else None


@pytest.mark.django_db
@pytest.mark.parametrize("judges", [["contrastive"], ["rules", "contrastive"]])
def test_each_planted_bug_is_one_finding_at_its_node_from_outcomes_alone(demo, judges):
    project = demo
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, enqueue=False, judges=judges))
    assert run.status == "succeeded" and run.total_count == 44 and run.error_count == 0
    report = run.config["contrastive"]
    assert report["status"] == "ok" and (report["failing"], report["succeeding"]) == (18, 26)
    by_bug: dict[str, list[dict]] = {bug: [] for bug in TOUCHED_BY}
    feedback = Feedback.objects.filter(run=run, judge="contrastive").select_related("trace")
    for finding in report["findings"]:
        traces = {f.trace.trace_id for f in feedback if any(d["feature"] == finding["feature"]
                                                             for d in f.details["findings"])}
        bug = _bug_of(project, traces)
        assert bug is not None, finding  # every finding is one planted bug: precision 1
        assert traces == _expected_traces(project, bug), finding["statement"]
        assert finding["node"] == BUG_NODE[bug], finding["statement"]
        by_bug[bug].append(finding)
    assert {bug: len(found) for bug, found in by_bug.items()} == {bug: 1 for bug in TOUCHED_BY}
    assert by_bug["misroute"][0]["statement"].endswith("`planner` writes `intent: refund`, `worker: orders_worker`")

    # One failing Feedback per failing trace carrying a finding, targeting a span of the finding's node, with
    # evidence that verifies against the stored spans; none on a decoy task or a succeeding trace.
    assert feedback.count() == 8 + 6 + 4
    assert not feedback.filter(trace__task_id__in=DECOYS).exists()
    assert set(feedback.values_list("trace__outcome", flat=True)) == {"failure"}
    assert set(feedback.values_list("verdict", "judge_kind", "status")) == {("fail", "contrastive", "ok")}
    pairs = set()
    for row in feedback:
        node = Span.objects.get(trace=row.trace, span_id=row.target_span_id).node
        assert node == row.details["findings"][0]["node"]
        pairs |= {(row.trace_id, e["span_id"]) for issue in row.issues for e in issue["evidence"]}
    verified = evidence_verified(project_id=project.pk, pairs=pairs)
    for row in feedback:
        for issue in row.issues:
            assert issue["evidence"] and issue["title"].startswith("Fails more often when ")
            for evidence in issue["evidence"]:
                assert verified.check(row.trace_id, evidence["span_id"], evidence["quote"]), evidence
    assert run.dropped_evidence == 0
    assert diagnosis_run_summary(project=project, run=run).contrastive["status"] == "ok"
    assert contrastive_run_judge(run_id=run.pk) is None  # once per run
    assert Feedback.objects.filter(run=run, judge="contrastive").count() == 18

    # After the insights build: exactly one insight per planted bug holds contrastive statements at its node.
    assert insights_build(run=run) is not None
    holding: dict[str, set[int]] = {bug: set() for bug in TOUCHED_BY}
    statements = InsightStatement.objects.filter(run=run, feedback__judge="contrastive", excluded=False)
    for statement in statements.select_related("node_insight"):
        insight = statement.node_insight
        assert insight is not None and not insight.is_other, statement.text
        bug = _bug_of(project, {statement.trace.trace_id})
        assert bug is not None and insight.node == BUG_NODE[bug], (statement.text, insight.node)
        holding[bug].add(insight.pk)
    assert {bug: len(ids) for bug, ids in holding.items()} == {bug: 1 for bug in TOUCHED_BY}
    for bug, (insight_id,) in holding.items():
        insight = Insight.objects.get(pk=insight_id)
        assert insight.failure_association == "associated", insight.title


@pytest.mark.django_db
def test_a_run_without_outcomes_says_why_the_contrastive_judge_was_skipped(demo):
    project = demo
    Trace.objects.filter(project=project, release="v2").update(outcome=None)
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="v2", enqueue=False))
    assert run.status == "succeeded" and "contrastive" in run.judges
    report = diagnosis_run_summary(project=project, run=run).contrastive
    assert report["status"] == "skipped" and "22 judged trace(s) have no outcome" in report["reason"]
    assert not Feedback.objects.filter(run=run, judge="contrastive").exists()
    assert DiagnosisRun.objects.get(pk=run.pk).insights_status == ""  # inline: built by its caller, as before
