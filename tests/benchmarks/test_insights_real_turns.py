"""benchmarks/insights_real's issue-41 figures on hand-written spans: turn numbering, "within one agent turn",
coverage and ticket precision, and the one-run-per-task sampling."""

import json

from benchmarks.insights_real.build import sample_one_per_task
from benchmarks.insights_real.turns import Labelled, score, turn_numbers


def spans():
    # root AGENT wraps model turns (a container, not a decision); tools belong to the turn before them.
    rows = [("root", "", "AGENT"), ("l1", "root", "LLM"), ("t1", "root", "TOOL"), ("l2", "root", "LLM"),
            ("t2", "root", "TOOL"), ("l3", "root", "LLM"), ("l4", "root", "LLM"), ("t4", "root", "TOOL")]
    return [{"span_id": s, "parent": p, "kind": k, "start": i, "tool": ""} for i, (s, p, k) in enumerate(rows)]


def test_turns_number_decisions_and_give_tools_the_turn_before_them():
    assert turn_numbers(spans=spans()) == {"root": 0, "l1": 1, "t1": 1, "l2": 2, "t2": 2, "l3": 3, "l4": 4, "t4": 4}


def test_an_agent_span_without_model_turns_below_it_is_a_decision():
    rows = [{"span_id": "a", "parent": "", "kind": "CHAIN", "start": 0}, {"span_id": "b", "parent": "a",
            "kind": "AGENT", "start": 1}, {"span_id": "c", "parent": "a", "kind": "TOOL", "start": 2}]
    assert turn_numbers(spans=rows) == {"a": 0, "b": 1, "c": 1}


def _row(pk: int, *, ticket: bool = True, association: str = "associated") -> dict:
    return {"id": pk, "title": f"insight {pk}", "review": "", "is_other": False, "association": association,
            "ticket": {"id": pk, "status": "open", "merged_into": None} if ticket else None}


def test_coverage_and_ticket_precision_within_one_turn():
    rows = {1: _row(1), 2: _row(2), 3: _row(3, association="not_associated")}
    statements = [
        {"trace_id": 10, "span_id": "l2", "insights": {1}},  # turn 2, label t1 at turn 1: a hit
        {"trace_id": 10, "span_id": "l4", "insights": {2}},  # turn 4: three turns away
        {"trace_id": 11, "span_id": "t4", "insights": {3}},  # a hit, but its insight is not eligible
        {"trace_id": 11, "span_id": "l1", "insights": {1}},  # turn 1 vs label at turn 4: a miss
    ]
    labelled = [Labelled(trace_pk=10, spans={"t1"}), Labelled(trace_pk=11, spans={"t4"})]
    figures = score(rows=rows, statements=statements, spans={10: spans(), 11: spans()}, labelled=labelled)["all"]
    assert (figures["covered"], figures["runs"]) == (1, 2)
    real = {t["insight"]: t["real"] for t in figures["ticket_rows"]}
    assert real == {1: True, 2: False, 3: True}  # 1: one of two statements hits, half is enough
    assert (figures["tickets_real"], figures["tickets_scored"]) == (2, 3)


def test_the_inconclusive_variant_counts_not_associated_insights_whose_lift_is_above_1():
    # Measured only: an insight "not associated" whose lift interval includes 1 with its point estimate above 1
    # counts as eligible, and as if it had a ticket; one below 1 does not.
    rows = {1: _row(1), 3: {**_row(3, ticket=False, association="not_associated"), "lift": 1.6, "lift_low": 0.9},
            4: {**_row(4, ticket=False, association="not_associated"), "lift": 0.8, "lift_low": 0.3}}
    statements = [
        {"trace_id": 10, "span_id": "l4", "insights": {1}},  # a miss
        {"trace_id": 11, "span_id": "t4", "insights": {3}},  # a hit in an inconclusive insight
        {"trace_id": 10, "span_id": "l2", "insights": {4}},  # a hit in an insight with lift below 1
    ]
    labelled = [Labelled(trace_pk=10, spans={"t1"}), Labelled(trace_pk=11, spans={"t4"})]
    figures = score(rows=rows, statements=statements, spans={10: spans(), 11: spans()}, labelled=labelled)["all"]
    assert figures["covered"] == 0
    variant = figures["inconclusive"]
    assert (variant["covered"], variant["insights"]) == (1, 1)
    assert (variant["tickets_real"], variant["tickets_scored"]) == (1, 2)


def test_one_run_per_task_sampling_is_deterministic_and_draws_one_file_per_task(tmp_path):
    for task in range(3):
        for trial in range(4):
            root = {"spanId": "a", "attributes": [{"key": "clear.task.id", "value": {"stringValue": f"t-{task}"}}]}
            document = {"resourceSpans": [{"scopeSpans": [{"spans": [root]}]}]}
            (tmp_path / f"run-{task}-{trial}.json").write_text(json.dumps(document))
    files = list(tmp_path.glob("*.json"))
    chosen = sample_one_per_task(files=files, seed=3)
    assert len(chosen) == 3 and {p.name.split("-")[1] for p in chosen} == {"0", "1", "2"}
    assert chosen == sample_one_per_task(files=list(reversed(files)), seed=3)
    assert any(sample_one_per_task(files=files, seed=s) != chosen for s in range(5))


def test_one_run_per_task_can_prefer_a_succeeding_run_read_from_the_root_span(tmp_path):
    for task in range(3):
        for trial in range(4):
            outcome = "success" if (task, trial) in {(0, 2), (1, 0), (1, 3)} else "failure"
            root = {"spanId": "a", "attributes": [{"key": "clear.task.id", "value": {"stringValue": f"t-{task}"}},
                                                  {"key": "clear.outcome", "value": {"stringValue": outcome}}]}
            document = {"resourceSpans": [{"scopeSpans": [{"spans": [root]}]}]}
            (tmp_path / f"run-{task}-{trial}.json").write_text(json.dumps(document))
    files = sorted(tmp_path.glob("*.json"))
    for seed in range(5):
        names = sorted(p.name for p in sample_one_per_task(files=files, seed=seed, prefer="succeeding"))
        # task 0 has one succeeding run, task 1 two, task 2 none (a failing one is drawn)
        assert names[0] == "run-0-2.json" and names[1] in ("run-1-0.json", "run-1-3.json"), names
        assert names[2].startswith("run-2-"), names
