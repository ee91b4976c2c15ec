"""Within-task contrast and suggestive hypotheses of the contrastive judge (issue 28, item 5;
diagnosis/judges/contrastive_tasks.py): eval suites run each task several times, and a failing run is compared with
the succeeding runs of its own task."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnosis.judges.contrastive import contrastive_findings, contrastive_results
from tests.diagnosis.support import span, view

TOOLS = ["search", "get_details", "cancel", "book", "refund", "update_address", "send_note", "lookup_user"]


def _run(trace_id: str, task: str, outcome: str, calls: list[tuple[str, dict]]):
    spans = []
    for i, (tool, arguments) in enumerate(calls, start=1):
        spans.append(span(f"s{i}", kind="TOOL", node="agent", at=i, tool_name=tool, name=f"execute_tool {tool}",
                          input=arguments, output={"ok": True}))
    return replace(view(*spans), trace_id=trace_id, outcome=outcome, task_id=task)


def _suite():
    """8 tasks x 4 trials. Each task needs its own write (TOOLS[t % 8]) after `get_details`; in tasks 0-5 one or two
    trials forget the write and fail. Across tasks no single tool is missing more often in failures: every task's
    write is another tool."""
    runs = []
    for t in range(8):
        write = TOOLS[(t % 6) + 2]
        for trial in range(4):
            forgets = t < 6 and trial in ((0, 1) if t % 2 else (0,))
            calls = [("get_details", {"id": f"R{t}"})] + ([] if forgets else [(write, {"id": f"R{t}"})])
            runs.append(_run(f"t{t}-{trial}", f"task-{t}", "failure" if forgets else "success", calls))
    return runs


def test_a_write_the_tasks_succeeding_runs_make_is_found_missing_in_the_failing_runs():
    report = contrastive_findings(_suite())
    assert report.status == "ok"
    missing = [f for f in report.findings if f.kind == "task_missing"]
    assert [f.key for f in missing] == ["task_missing|agent"], \
        [f.statement for f in report.findings] or [f.statement for f in report.suggestive]
    finding = missing[0]
    # Every failing run forgot its task's write, no succeeding run forgot anything; the write differs by task, so
    # only the general feature recurs, and each trace's note names its own tool.
    assert (finding.failing_with, finding.succeeding_with) == (9, 0)
    assert finding.title == "Fails more often when a tool the task's succeeding runs call is not called"
    assert finding.notes["t0-0"] == ["`cancel` is not called"] and finding.notes["t3-1"] == ["`update_address` is not called"]
    results = contrastive_results(report)
    issue = next(i for r in results["t3-1"] for i in r.issues if i.title == finding.title)
    assert issue.detail.endswith("in this trace: `update_address` is not called")
    # The general "without" feature across tasks is explained away by it, not reported beside it.
    assert not any(f.kind == "without" for f in report.findings), [f.statement for f in report.findings]


def test_within_task_features_are_leave_one_out_for_succeeding_runs_too():
    # One task, two succeeding runs that differ: each is held to the other, so each has a feature (no circularity).
    runs = [_run("a", "task", "success", [("get_details", {"id": "1"}), ("book", {"id": "1"})]),
            _run("b", "task", "success", [("get_details", {"id": "1"}), ("refund", {"id": "1"})])]
    from diagnosis.judges.contrastive_features import run_features

    features = run_features(runs)
    assert "task_missing|agent|book" in features["b"] and "task_extra|agent|refund" in features["b"]
    assert "task_missing|agent|refund" in features["a"] and "task_extra|agent|book" in features["a"]


def test_an_argument_that_differs_from_the_succeeding_runs_is_a_feature():
    runs = [_run("f", "task", "failure", [("book", {"cabin": "economy", "id": "9"})]),
            _run("s1", "task", "success", [("book", {"cabin": "business", "id": "9"})]),
            _run("s2", "task", "success", [("book", {"cabin": "business", "id": "9"})])]
    from diagnosis.judges.contrastive_features import run_features

    features = run_features(runs)
    assert "task_arg|agent|book|cabin" in features["f"]
    assert "task_arg|agent|book|id" not in features["f"]
    assert not any(k.startswith("task_arg") for k in features["s1"])


def test_a_call_without_the_call_that_precedes_it_in_succeeding_runs_is_a_feature():
    runs = [_run("f", "task", "failure", [("cancel", {"id": "1"})]),
            _run("s1", "task", "success", [("get_details", {"id": "1"}), ("cancel", {"id": "1"})]),
            _run("s2", "task", "success", [("get_details", {"id": "1"}), ("cancel", {"id": "1"})])]
    from diagnosis.judges.contrastive_features import run_features

    features = run_features(runs)
    assert "unpreceded|get_details|cancel" in features["f"]
    assert features["f"]["unpreceded|get_details|cancel"].phrase == "`cancel` is called without `get_details` before it"
    assert "unpreceded|get_details|cancel" not in features["s1"]


def test_when_nothing_passes_the_correction_the_strongest_are_suggestive_with_p_and_q():
    # 3 of 10 failing vs 1 of 10 succeeding: tested (support 3, more frequent in failures), far from significant.
    runs = [_run(f"f{i}", "", "failure", [("lookup_user", {})] + ([("send_note", {})] if i < 3 else []))
            for i in range(10)]
    runs += [_run(f"s{i}", "", "success", [("lookup_user", {})] + ([("send_note", {})] if i < 1 else []))
             for i in range(10)]
    report = contrastive_findings(runs)
    assert report.status == "ok" and not report.findings
    assert report.suggestive and report.tested >= 1
    first = report.as_dict()["suggestive"][0]
    assert first["p_value"] > 0.05 and first["q_value"] >= first["p_value"]
    assert "send_note" in first["statement"]
    effects = [f.rate_with - f.rate_without for f in report.suggestive]
    assert effects == sorted(effects, reverse=True)


@pytest.mark.django_db
def test_the_run_page_shows_suggestive_hypotheses_with_p_and_q(project, owner):
    from diagnosis.models import DiagnosisRun
    from tests.frontend.conftest import client_for

    runs = [_run(f"f{i}", "", "failure", [("lookup_user", {})] + ([("send_note", {})] if i < 3 else []))
            for i in range(10)]
    runs += [_run(f"s{i}", "", "success", [("lookup_user", {})] + ([("send_note", {})] if i < 1 else []))
             for i in range(10)]
    report = contrastive_findings(runs).as_dict()
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.SUCCEEDED, judges=["contrastive"],
                                      config={"contrastive": report})
    page = client_for(owner).get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-testid="contrastive-suggestive"' in page and "No hypothesis passed the correction" in page
    first = report["suggestive"][0]
    # rendered as the other pages render `code` spans (issue 40: no raw backticks)
    assert "`" in first["statement"] and "`" not in page.split('data-testid="contrastive-suggestive"', 1)[1]
    assert first["statement"].replace("`", "").split()[-1] in page and "<code>lookup_user</code>" in page


@pytest.mark.parametrize(("name", "write"), [
    ("cancel_reservation", True), ("createIssue", True), ("github.create_issue", True), ("UpdateAddress", True),
    ("send-note", True), ("get_reservation_details", False), ("search_direct_flight", False), ("think", False),
    ("transfer_to_human_agents", False), ("bookkeeping_report", False),
])
def test_a_write_tool_is_named_by_a_verb_that_changes_state(name, write):
    from diagnosis.conf import write_tool_verbs
    from diagnosis.judges.contrastive_tasks import is_write_tool

    assert is_write_tool(name, write_tool_verbs()) is write


def test_write_tool_verbs_come_from_the_setting(settings):
    from diagnosis.conf import write_tool_verbs
    from diagnosis.judges.contrastive_tasks import is_write_tool

    settings.CLEAR_WRITE_TOOL_VERBS = ["Transfer"]
    assert is_write_tool("transfer_to_human_agents", write_tool_verbs())
    assert not is_write_tool("cancel_reservation", write_tool_verbs())


def test_missing_and_extra_writes_are_a_class_of_their_own_and_lookups_are_not_in_it():
    from diagnosis.judges.contrastive_features import run_features

    ok = [("get_details", {"id": "1"}), ("cancel", {"id": "1"})]
    runs = [_run("no-write", "task", "failure", [("get_details", {"id": "1"})]),
            _run("no-lookup", "task", "failure", [("cancel", {"id": "1"})]),
            _run("extra-write", "task", "failure", [*ok, ("refund", {"id": "1"})]),
            _run("extra-lookup", "task", "failure", [*ok, ("lookup_user", {"id": "1"})]),
            _run("s1", "task", "success", ok), _run("s2", "task", "success", ok)]
    features = run_features(runs)
    assert "task_missing|agent|write" in features["no-write"]
    assert features["no-write"]["task_missing|agent|write"].notes == ["`cancel` is not called"]
    assert "task_missing|agent" in features["no-lookup"] and "task_missing|agent|write" not in features["no-lookup"]
    assert "task_extra|agent|write" in features["extra-write"]
    assert "task_extra|agent" in features["extra-lookup"] and "task_extra|agent|write" not in features["extra-lookup"]
    assert not any(key.endswith("|write") for key in features["s1"])


def test_a_list_argument_is_compared_whole_whatever_the_order_of_its_items():
    from diagnosis.judges.contrastive_features import run_features

    good = [{"flight_number": "HAT136", "date": "2024-05-20"}, {"flight_number": "HAT039", "date": "2024-05-20"}]
    runs = [_run("reordered", "task", "success", [("update_flights", {"id": "R1", "flights": good[::-1]})]),
            _run("wrong", "task", "failure", [("update_flights", {"id": "R1", "flights": [good[0], {
                "flight_number": "HAT040", "date": "2024-05-20"}]})]),
            _run("s1", "task", "success", [("update_flights", {"id": "R1", "flights": good})]),
            _run("s2", "task", "success", [("update_flights", {"id": "R1", "flights": good})])]
    features = run_features(runs)
    assert "task_arg|agent|update_flights|flights" in features["wrong"]
    hit = features["wrong"]["task_arg|agent|write"]
    assert hit.notes == ["`update_flights` with another `flights`"] and hit.evidence[0].quote == '"flights"'
    assert not any(key.startswith("task_arg") for key in features["reordered"])


def _turn(span_id: str, at: float, last_role: str):
    from tests.diagnosis.support import span as make_span

    return make_span(span_id, kind="LLM", node="agent", at=at,
                     input=[{"role": "system", "content": "Policy."}, {"role": last_role, "content": "..."}])


def test_a_write_right_after_a_tool_result_is_left_to_the_unconfirmed_write_rule():
    # rule.unconfirmed_write finds it in one run alone (tests/diagnosis/judges/test_rules_writes.py); as a contrastive
    # feature too it was a second insight over the same traces.
    from diagnosis.judges.contrastive_features import run_features

    tool = lambda span_id, at, name: span(span_id, kind="TOOL", node="agent", at=at, tool_name=name,  # noqa: E731
                                          name=f"execute_tool {name}", input={"id": "1"}, output={"ok": True})
    unconfirmed = replace(view(_turn("l1", 1, "user"), tool("t1", 2, "get_details"), _turn("l2", 3, "tool"),
                               tool("t2", 4, "cancel")), trace_id="u", outcome="failure")
    confirmed = replace(view(_turn("l1", 1, "user"), tool("t1", 2, "get_details"), _turn("l2", 3, "user"),
                             tool("t2", 4, "cancel")), trace_id="c", outcome="success")
    features = run_features([unconfirmed, confirmed])
    assert not any(key.startswith("unconfirmed") for hits in features.values() for key in hits)


def test_a_succeeding_trace_with_a_findings_feature_gets_a_passing_result_that_carries_it():
    # Its insight then counts the succeeding traces it shows in: "40 failing / 0 succeeding" would hide the 7
    # successes that have the feature too, and overstate the lift.
    runs = [_run(f"f{i}", "", "failure", [("lookup_user", {})] + ([("send_note", {})] if i < 8 else []))
            for i in range(10)]
    runs += [_run(f"s{i}", "", "success", [("lookup_user", {})] + ([("send_note", {})] if i < 1 else []))
             for i in range(10)]
    report = contrastive_findings(runs)
    finding = next(f for f in report.findings if "send_note" in f.phrase)
    assert (finding.failing_with, finding.succeeding_with) == (8, 1)
    results = contrastive_results(report)
    failing = next(r for r in results["f0"] if any(i.title == finding.title for i in r.issues))
    assert (failing.verdict, failing.score) == ("fail", 0.0)
    [passing] = [r for r in results["s0"] if any(i.title == finding.title for i in r.issues)]
    assert (passing.verdict, passing.score) == ("pass", 1.0) and "succeeded" in passing.critique
    issue = next(i for i in passing.issues if i.title == finding.title)
    assert issue.severity == "low" and issue.evidence and issue.evidence[0].span_id in {s.span_id for s in runs[10].spans}
    assert "s1" not in results  # a succeeding trace without the feature gets nothing


def test_one_run_per_task_compares_no_tasks_by_which_tools_they_call():
    """Issue 41: with one run per task every comparison is across tasks, and which tools a run calls is what its task
    needs: the tasks that need `book` fail more often here, which says which tasks are hard, not what a run did
    wrong. Without task ids nothing says the runs are of different tasks, and the feature is kept."""
    runs = []
    for t in range(16):
        books = t < 8
        calls = [("get_details", {"id": f"R{t}"})] + ([("book", {"id": f"R{t}"})] if books else [])
        fails = (t % 8) < (6 if books else 1)
        runs.append(_run(f"t{t}", f"task-{t}", "failure" if fails else "success", calls))
    kinds = {"calls", "count", "items", "before", "without", "steps", "arg"}
    report = contrastive_findings(runs)
    found = [f.statement for f in [*report.findings, *report.suggestive] if f.kind in kinds]
    assert report.status == "ok" and not found, found
    anonymous = contrastive_findings([replace(r, task_id="") for r in runs])
    assert any(f.kind in kinds for f in [*anonymous.findings, *anonymous.suggestive]), \
        [f.statement for f in [*anonymous.findings, *anonymous.suggestive]]
