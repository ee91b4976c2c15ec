"""Outliers are not bugs by themselves (issue 39 item 4): "far above the node's median" needs a minimum relative
excess as well as the robust z; a succeeding trace gets no failing verdict from an outlier; an insight of outlier
findings alone is listed only when associated with failure, and a real blow-up in the failing runs still is."""

import pytest

from diagnosis.judges.rules.outliers import node_stats_compute, rule_token_outlier
from diagnosis.models import Feedback, Insight
from diagnosis.selectors import insight_list
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose, held  # noqa: F401 - a fixture
from tests.diagnosis.support import span, support_desk_ingest, view
from traces.models import Span


def _planner_spans(tokens: list[int]):
    return [span(f"s{i}", node="planner", kind="LLM", at=i, input_tokens=t, output_tokens=0)
            for i, t in enumerate(tokens)]


def _trace(spans, outcome):
    trace = view(*spans)
    trace.outcome = outcome
    return trace


def _stats(spans):
    return node_stats_compute([(s.node, s.kind, s.tool_name, 1.0, (s.input_tokens or 0) + (s.output_tokens or 0))
                               for s in spans])


def test_eleven_percent_above_a_tight_median_is_no_outlier():
    """The demo's case: 201-205 tokens against a median of 181, a robust z of about 5 (MAD of 3)."""
    tokens = [178, 179, 180, 181, 181, 181, 182, 183, 184, 201, 205]
    spans = _planner_spans(tokens)
    stats = _stats(spans)
    for outcome in ("success", "failure", None):
        results = rule_token_outlier(_trace(spans, outcome), stats)
        assert [r.verdict for r in results] == ["pass"] and not results[0].issues, (outcome, results)


def test_a_blow_up_fails_a_failing_trace_and_is_only_noted_on_a_succeeding_one():
    tokens = [178, 179, 180, 181, 181, 181, 182, 183, 184, 905]
    spans = _planner_spans(tokens)
    stats = _stats(spans)
    (failing,) = rule_token_outlier(_trace(spans, "failure"), stats)
    assert failing.verdict == "fail" and failing.target_span_id == "s9" and failing.issues
    (noted,) = rule_token_outlier(_trace(spans, "success"), stats)
    assert noted.verdict == "pass" and noted.target_span_id == "s9" and noted.issues  # the finding, not a failure


@pytest.mark.django_db
def test_a_planted_blow_up_in_the_failing_runs_makes_an_associated_outlier_insight(project, desk_rubrics):  # noqa: F811
    support_desk_ingest(project=project, bugs="all", release="r1")
    blown = Span.objects.filter(project=project, trace__outcome="failure", node="billing_worker", kind="LLM")
    assert blown.exists()
    for planted in blown:
        planted.input_tokens = (planted.input_tokens or 0) * 5 + 5 * (planted.output_tokens or 0)
        planted.save(update_fields=["input_tokens"])
    run = diagnose(project, "r1")

    # No succeeding trace has a failing outlier verdict: the demo's +11% at the planner is gone too.
    assert not Feedback.objects.filter(run=run, judge__in=["rule.token_outlier", "rule.latency_outlier"],
                                       verdict="fail", trace__outcome="success").exists()
    planner = Span.objects.filter(project=project, node="planner").values_list("span_id", flat=True)
    assert not Feedback.objects.filter(run=run, judge="rule.token_outlier", target_span_id__in=list(planner)).exists()
    outliers = [i for i in Insight.objects.filter(project=project, level="node", node="billing_worker")
                if held(i, run).filter(judge="rule.token_outlier").exists()]
    assert outliers, "the rule is not switched off"
    (outlier,) = [i for i in outliers if i.failure_association == "associated"]
    assert outlier in insight_list(project=project)
