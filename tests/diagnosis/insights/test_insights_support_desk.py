"""Insights from the example agent's planted faults, without a model: statements from rule and rubric feedback →
embeddings → clusters per node and system-wide → insights that keep their identity across runs."""

import pytest

from diagnosis.judges.text import normalise
from diagnosis.models import Feedback, Insight, InsightLink, InsightStatement
from diagnosis.selectors import insight_evidence_list, insight_links, insight_list
from diagnosis.services.evidence import span_text
from diagnosis.services.trace_view import trace_view_build
from tests.diagnosis.insights.conftest import BUG_NODE, TOUCHED_BY, diagnose, held, insight_for_tasks, tasks_of
from tests.diagnosis.support import support_desk_ingest
from traces.models import Span

pytestmark = pytest.mark.django_db


def test_each_planted_bug_is_its_own_insight_at_its_node_with_verified_evidence(project, desk_rubrics):
    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnose(project, "r1")
    summary = run.insights_summary
    assert run.insights_status == "done" and summary["judged"] == 22 and summary["naming"]["calls"] == 0

    found = {bug: insight_for_tasks(project, BUG_NODE[bug], TOUCHED_BY[bug], run) for bug in TOUCHED_BY}
    assert len({i.pk for i in found.values()}) == 3
    for bug, insight in found.items():
        assert insight.level == "node" and insight.node == BUG_NODE[bug] and insight.status == "open"
        assert insight.title and insight.description and insight.recommendation and insight.root_cause
        assert insight.naming_source == "offline" and insight.terms and len(insight.fingerprint) == 40
        assert insight.trace_count == len(TOUCHED_BY[bug]) and insight.frequency == pytest.approx(
            len(TOUCHED_BY[bug]) / 22)
        assert insight.lift is not None and insight.lift_low <= insight.lift <= insight.lift_high
        assert insight.trend == [{"release": "r1", "count": len(TOUCHED_BY[bug]), "judged": 22,
                                  "frequency": round(len(TOUCHED_BY[bug]) / 22, 6), "run": str(run.pk)}]
        evidence = list(insight_evidence_list(project=project, insight=insight))
        assert {e.trace.task_id for e in evidence} == TOUCHED_BY[bug]
        for e in evidence:  # every citation is in the stored text of the span it names
            spans = {s.span_id: s for s in trace_view_build(trace=e.trace).spans}
            assert normalise(e.quote) in span_text(spans[e.span_id])
            assert e.feedback.run_id == run.pk and e.statement.node_insight_id == insight.pk
        # one problem, one insight: no system twin of the fault; a system insight holding it spans several
        # nodes or carries trace-level statements
        for link in insight_links(project=project, insight=insight):
            nodes = set(link.system.affected_nodes)
            assert len(nodes) >= 2 or InsightStatement.objects.filter(system_insight=link.system, node="").exists()

    # The retry loop's other symptoms (the rate-limited calls, the worker giving up) stay at billing_worker and
    # within its traces; misroute also shows where order_lookup is called.
    for insight in Insight.objects.filter(project=project, level="node", node="billing_worker", is_other=False):
        assert tasks_of(insight, run) == TOUCHED_BY["retry_loop"]
    insight_for_tasks(project, "orders_worker", TOUCHED_BY["misroute"], run)

    # Nothing is dropped: every node statement has a node insight or bucket, every trace-level statement a system
    # insight or bucket.
    statements = InsightStatement.objects.filter(run=run)
    assert statements.count() == summary["statements"] > 0
    assert not statements.exclude(node="").filter(node_insight=None).exists()
    assert not statements.filter(node="", system_insight=None).exists()
    # The decoy's not-found is one the desk handles (diagnosis/judges/recovery.py): a pass, so in no insight or
    # bucket; buckets stay out of the insight list.
    assert not any("order-not-found" in tasks_of(i, run) for i in Insight.objects.filter(project=project))
    for other in Insight.objects.filter(project=project, is_other=True):
        assert other not in insight_list(project=project, include_other=False)
    assert InsightLink.objects.filter(system__project=project).count() == summary["links"]


def test_a_run_over_the_same_traces_finds_the_same_insights(project, desk_rubrics):
    support_desk_ingest(project=project, bugs="all", release="r1")
    first = diagnose(project, "r1")
    before = {i.pk: (i.title, i.count, i.trace_count) for i in Insight.objects.filter(project=project)}
    second = diagnose(project, "r1")
    assert second.insights_summary["new"] == 0 and second.insights_summary["matched"] == first.insights_summary["new"]
    after = {i.pk: (i.title, i.count, i.trace_count) for i in Insight.objects.filter(project=project)}
    assert after == before
    for insight in Insight.objects.filter(project=project):
        assert set(insight.occurrences.values_list("run_id", flat=True)) == {first.pk, second.pk}
        assert insight.last_run_id == second.pk and tasks_of(insight, first) == tasks_of(insight, second)
        assert [point["run"] for point in insight.trend] == [str(second.pk)]  # r1 is described by the later run


def test_a_new_failure_adds_an_insight_a_fixed_one_reopens_a_rejected_one_stays_rejected(project, desk_rubrics):
    from diagnosis.services.insights_review import insight_reject, insight_status_set

    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="r1")
    support_desk_ingest(project=project, bugs="all", release="r2", seed=3)
    support_desk_ingest(project=project, bugs="none", release="r3")
    first = diagnose(project, "r1")
    assert not InsightStatement.objects.filter(run=first, judge=desk_rubrics[3].judge_name).exists()  # no misroute
    mediator = insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"], first)
    looping = insight_for_tasks(project, "billing_worker", TOUCHED_BY["retry_loop"], first)
    billing = set(Insight.objects.filter(project=project, node="billing_worker").values_list("pk", flat=True))
    known = set(Insight.objects.filter(project=project).values_list("pk", flat=True))
    insight_status_set(project=project, insight=mediator, status="fixed")
    insight_reject(project=project, insight=looping, note="rate limits are expected")

    second = diagnose(project, "r2")
    new = Insight.objects.filter(project=project).exclude(pk__in=known)
    assert second.insights_summary["new"] == new.filter(is_other=False).count() > 0
    routing = insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], second)
    assert routing.pk not in known and routing.first_run_id == second.pk
    assert insight_for_tasks(project, "orders_worker", TOUCHED_BY["misroute"], second).pk not in known

    mediator.refresh_from_db()
    assert mediator.status == "open" and mediator.reopened_at is not None and mediator.reopen_count == 1
    assert mediator.events.filter(kind="reopened", run=second).exists()
    assert tasks_of(mediator, second) == TOUCHED_BY["mediator_race"]
    assert [(p["release"], p["count"]) for p in mediator.trend] == [("r1", 4), ("r2", 4)]

    looping.refresh_from_db()
    assert looping.review == "rejected" and looping.last_run_id == second.pk
    assert tasks_of(looping, second) == TOUCHED_BY["retry_loop"]
    assert looping not in insight_list(project=project) and looping in insight_list(project=project,
                                                                                     review="rejected")
    assert set(Insight.objects.filter(project=project, node="billing_worker").values_list("pk", flat=True)) == billing

    # Fixed for real: a release without the fault leaves the insight fixed, its trend at zero.
    insight_status_set(project=project, insight=mediator, status="fixed")
    diagnose(project, "r3")
    mediator.refresh_from_db()
    assert mediator.status == "fixed" and mediator.reopen_count == 1
    assert [(p["release"], p["count"]) for p in mediator.trend] == [("r1", 4), ("r2", 4), ("r3", 0)]
    assert mediator not in insight_list(project=project, release="r3")
    assert mediator in insight_list(project=project, release="r2", level="node", node="mediator", status="fixed")


def test_merge_and_split_survive_a_later_run(project, desk_rubrics):
    from diagnosis.services.insights_review import insight_merge, insight_split

    support_desk_ingest(project=project, bugs="all", release="r1")
    # A second pattern at the planner to merge: a 5x token blow-up in three traces the misroute leaves alone (the
    # example's own token spread is no outlier).
    planner_llm = Span.objects.filter(project=project, node="planner", kind="LLM")
    tasks = sorted(set(planner_llm.values_list("trace__task_id", flat=True)) - TOUCHED_BY["misroute"])[:3]
    for planted in planner_llm.filter(trace__task_id__in=tasks):
        planted.input_tokens = 5 * ((planted.input_tokens or 0) + (planted.output_tokens or 0))
        planted.save(update_fields=["input_tokens"])
    first = diagnose(project, "r1")
    routing = insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], first)
    (verbose,) = [i for i in Insight.objects.filter(project=project, level="node", node="planner", is_other=False)
                  if i.pk != routing.pk]
    assert {s.judge for s in held(verbose)} == {"rule.token_outlier"}

    merged = insight_merge(project=project, source=verbose, target=routing)
    verbose.refresh_from_db()
    assert merged.pk == routing.pk and verbose.merged_into_id == routing.pk
    assert {s.judge for s in held(merged)} == {desk_rubrics[3].judge_name, "rule.token_outlier"}
    assert merged.count == 7 and merged.trace_count == len(tasks_of(merged)) == 7
    assert list(insight_list(project=project, node="planner", include_other=False)) == [merged]
    assert merged.events.filter(kind="merged").exists() and verbose.events.filter(kind="merged").exists()

    (errors,) = [i for i in Insight.objects.filter(project=project, level="node", node="billing_worker")
                 if any("ToolRetriesExhaustedError" in s.text for s in held(i))]
    gave_up = [s.pk for s in held(errors) if "ToolRetriesExhaustedError" in s.text]
    before = errors.count
    assert len(gave_up) == 3 and before > 3
    split = insight_split(project=project, insight=errors, statement_ids=gave_up)
    errors.refresh_from_db()
    assert split.split_from_id == errors.pk and split.count == 3 and split.trace_count == 3
    assert errors.count == before - 3 and split.title.startswith("invoke_agent billing_worker failed")
    assert set(insight_evidence_list(project=project, insight=split).values_list("statement_id", flat=True)) <= \
        set(gave_up)
    assert (split.level, split.node) == ("node", "billing_worker") and split.centroid and split.fingerprint

    second = diagnose(project, "r1")
    assert second.insights_summary["new"] == 0
    planner = Insight.objects.filter(project=project, level="node", node="planner", is_other=False, merged_into=None)
    assert list(planner) == [merged]
    assert {s.judge for s in held(merged, second)} == {desk_rubrics[3].judge_name, "rule.token_outlier"}
    assert {"ToolRetriesExhaustedError" in s.text for s in held(split, second)} == {True}
    assert held(split, second).count() == 3
    assert not any("ToolRetriesExhaustedError" in s.text for s in held(errors, second))
    assert held(errors, second).count() == before - 3


def test_feedback_marked_wrong_leaves_the_clustering(project, desk_rubrics, owner):
    from diagnosis.services.insights import insights_build
    from diagnosis.services.insights_review import feedback_mark_wrong

    support_desk_ingest(project=project, bugs="all", release="r1")
    first = diagnose(project, "r1")
    mediator = insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"], first)
    wrong = Feedback.objects.get(run=first, judge=desk_rubrics[0].judge_name, trace__task_id="two-orders-status")
    correction = feedback_mark_wrong(project=project, feedback=wrong, note="that order was cancelled", user=owner)
    assert correction.feedback_id == wrong.pk and wrong.correction.note == "that order was cancelled"
    assert not held(mediator).filter(feedback=wrong).exists()

    second = diagnose(project, "r1")
    same = Feedback.objects.get(run=second, judge=wrong.judge, trace_id=wrong.trace_id,
                                target_span_id=wrong.target_span_id)
    assert not InsightStatement.objects.filter(feedback=same).exists()
    assert tasks_of(mediator, second) == TOUCHED_BY["mediator_race"] - {"two-orders-status"}
    assert insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"] - {"two-orders-status"},
                             second).pk == mediator.pk

    assert insights_build(run=first) is None  # built already: a redelivered task does nothing
    insights_build(run=first, force=True)
    assert not InsightStatement.objects.filter(feedback=wrong).exists()
    assert tasks_of(mediator, first) == TOUCHED_BY["mediator_race"] - {"two-orders-status"}


def test_one_problem_one_insight_each_named_at_its_first_symptom(project, desk_rubrics):
    """Each planted bug is one problem: the retry loop's repeated calls and their rate-limit errors are one node
    insight at billing_worker; the misroute's rubric violation at the planner and the order lookups it causes at
    orders_worker are one system insight linking both, named after the planner's; no insight mixes two bugs."""
    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnose(project, "r1")
    (retry,) = Insight.objects.filter(project=project, level="node", node="billing_worker", is_other=False,
                                      occurrences__run=run)
    assert tasks_of(retry, run) == TOUCHED_BY["retry_loop"]
    assert "called" in retry.title and "identical arguments" in retry.title  # the loop, not its errors
    assert {s.judge for s in held(retry, run)} >= {"rule.repeated_tool_call", "rule.span_error"}

    planner = insight_for_tasks(project, "planner", TOUCHED_BY["misroute"], run)
    (link,) = insight_links(project=project, insight=planner)
    system = link.system
    assert tasks_of(system, run) == TOUCHED_BY["misroute"] and set(system.affected_nodes) == {"planner",
                                                                                              "orders_worker"}
    assert system.title == planner.title
    linked = {link.node.node for link in insight_links(project=project, insight=system)}
    assert linked == {"planner", "orders_worker"}

    for insight in Insight.objects.filter(project=project, is_other=False, occurrences__run=run):
        touched = {bug for bug, tasks in TOUCHED_BY.items() if tasks_of(insight, run) & tasks}
        if insight.failure_association != "not_associated":  # a token outlier here and there is no bug's
            assert len(touched) <= 1, (insight.title, touched)
