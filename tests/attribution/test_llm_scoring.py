"""The Who&When LLM methods scored like the offline ones: `manage.py attribution_score --json` on six Who&When
Algorithm-Generated traces, the fake OpenAI-compatible server answering right on some, wrong on others and failing on
two (HTTP 500; invalid output twice). Checks the exact accuracies, the model calls each method implies, the
label-free baselines beside them, and that a failed call is scored as an error, never as a guess.

The fake reads the trace's goal from the request and answers from the labels this test read; the product code is
handed the trace files only (links in a temporary folder) and sees the labels only through the scorer.
"""

import json
from dataclasses import dataclass
from io import StringIO

import pytest
from django.core.management import call_command

from diagnosis.attribution.baselines import AGENT_BASELINES, BASELINE_NAMES, STEP_BASELINES
from diagnosis.attribution.models import Attribution
from diagnosis.attribution.steps import Step, goal_text, trace_steps
from diagnosis.services.trace_view import trace_view_build
from traces.models import Trace
from traces.services.imports import traces_import

pytestmark = pytest.mark.django_db

MODEL = "openai/gpt-4o-mini"
# The six smallest traces and what the fake model does on each.
PLAN = {
    "Algorithm-Generated-38.json": "right",
    "Algorithm-Generated-12.json": "right",
    # all_at_once: the right agent, a step one off; step_by_step: "not decisive" for every step (inconclusive)
    "Algorithm-Generated-93.json": "near",
    # all_at_once: another agent, a step three off; step_by_step: "decisive" at another agent's first turn
    "Algorithm-Generated-53.json": "wrong",
    "Algorithm-Generated-66.json": "server_error",  # HTTP 500 on every request (one retry each)
    "Algorithm-Generated-58.json": "invalid",  # prose instead of JSON, also after the one repair
}
RETRIES = 1


@dataclass
class Case:
    trace_id: str
    plan: str
    label_agent: str
    label_step: int
    steps: list[Step]

    def step(self, index: int) -> Step:
        return next(step for step in self.steps if step.index == index)

    def other_agent_turn(self) -> Step:
        """The first turn of an agent other than the labelled one (the "wrong" answers)."""
        return next(s for s in self.steps if s.is_actor and s.agent.casefold() != self.label_agent.casefold())


def payload(request: dict) -> dict:
    user = request["messages"][1]["content"]  # a repair request keeps the first user message in place
    return json.loads(user.split("<trace_data>\n", 1)[1].rsplit("\n</trace_data>", 1)[0])


@pytest.fixture
def whowhen_slice(project, shared_dir, tmp_path, settings):
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    settings.CLEAR_JUDGE_MAX_RETRIES = RETRIES
    source = shared_dir / "datasets" / "whowhen-algorithm-generated"
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in PLAN:
        (folder / name).symlink_to(source / name)
    summary = traces_import(project=project, path=folder, outcome="failure")
    assert summary.requests_accepted == len(PLAN)

    labels = [json.loads(line) for line in (source / "labels.jsonl").read_text().splitlines() if line.strip()]
    labels = [label for label in labels if label["file"] in PLAN]
    labels_path = tmp_path / "labels.jsonl"
    labels_path.write_text("".join(json.dumps(label) + "\n" for label in labels))

    by_goal = {}
    for label in labels:
        view = trace_view_build(trace=Trace.objects.get(project=project, trace_id=label["trace_id"]))
        case = Case(trace_id=label["trace_id"], plan=PLAN[label["file"]], label_agent=label["mistake_agent"],
                    label_step=int(label["mistake_step"]), steps=trace_steps(view))
        # The labelled step is that agent's own turn, so a "yes" at it names the labelled agent and step.
        labelled = case.step(case.label_step)
        assert labelled.is_actor and labelled.agent.casefold() == case.label_agent.casefold()
        by_goal[goal_text(view)] = case
    assert len(by_goal) == len(PLAN)  # the goal tells the fake which trace a request is about
    return by_goal, labels_path


def failure(case: Case):
    if case.plan == "server_error":
        return {"status": 500, "headers": {"Retry-After": "0"},
                "body": {"error": {"message": "upstream overloaded", "type": "server_error"}}}
    if case.plan == "invalid":
        return "I think the second agent got it wrong."
    return None


def all_at_once_reply(cases: dict[str, Case]):
    def reply(request: dict):
        case = cases[payload(request)["goal"]]
        if failure(case) is not None:
            return failure(case)
        agent, step = case.label_agent.lower(), case.label_step  # agents match case-insensitively
        if case.plan == "near":
            step = case.label_step + 1
        elif case.plan == "wrong":
            agent, step = case.other_agent_turn().agent, case.label_step + 3
        case.step(step)  # the fake names steps of the log only (else the method would ask for a repair)
        return json.dumps({"agent": agent, "step": step, "reason": "scripted", "confidence": 0.7})

    return reply


def step_by_step_reply(cases: dict[str, Case]):
    def reply(request: dict):
        data = payload(request)
        case = cases[data["goal"]]
        if failure(case) is not None:
            return failure(case)
        decisive = {"right": case.label_step, "near": None, "wrong": case.other_agent_turn().index}[case.plan]
        return json.dumps({"decisive": data["review_step"] == decisive, "reason": "scripted"})

    return reply


def score(project, labels_path, method: str, fake_llm) -> dict:
    out = StringIO()
    call_command("attribution_score", "--project", project.name, "--labels", str(labels_path), "--method", method,
                 "--model", MODEL, "--api-base", fake_llm.api_base, "--json", stdout=out)
    return json.loads(out.getvalue())


def assert_failures_are_errors(project, cases: dict[str, Case], method: str) -> None:
    for case in cases.values():
        if case.plan not in ("server_error", "invalid"):
            continue
        attribution = Attribution.objects.get(project=project, method=method, trace__trace_id=case.trace_id)
        assert attribution.status == "error" and attribution.error
        assert (attribution.agent, attribution.span_id, attribution.step_index) == ("", "", None)
        assert attribution.calls == (1 + RETRIES if case.plan == "server_error" else 2)
        assert attribution.details["cause"] == ("server_error" if case.plan == "server_error" else "invalid_output")


def assert_baselines(report: dict) -> None:
    assert set(report["baselines"]) == set(AGENT_BASELINES + STEP_BASELINES) == set(BASELINE_NAMES)
    for name in AGENT_BASELINES:
        assert 0 <= report["baselines"][name]["agent"] <= 1
    for name in STEP_BASELINES:
        rates = report["baselines"][name]
        assert 0 <= rates["step_exact"] <= rates["step_within_1"] <= rates["step_within_3"] <= 1


def test_all_at_once_scored_against_the_labels(project, whowhen_slice, fake_llm):
    cases, labels_path = whowhen_slice
    fake_llm.script(default=all_at_once_reply(cases))
    report = score(project, labels_path, "all_at_once", fake_llm)

    # right, right, near (agent right, step ±1), wrong (step ±3), and two errors that count as wrong.
    assert (report["method"], report["count"], report["computed"]) == ("all_at_once", 6, 6)
    assert report["agent_accuracy"] == round(3 / 6, 4)
    assert report["step_accuracy"] == round(2 / 6, 4)
    assert report["step_within_1"] == round(3 / 6, 4)
    assert report["step_within_3"] == round(4 / 6, 4)
    assert (report["errors"], report["inconclusive"], report["labels_without_trace"]) == (2, 0, 0)
    assert_baselines(report)

    # One call per trace; the 500 is retried once, the invalid reply repaired once.
    assert fake_llm.call_count == 4 * 1 + (1 + RETRIES) + 2
    stored = Attribution.objects.filter(project=project, method="all_at_once")
    assert sum(a.calls for a in stored) == fake_llm.call_count
    assert all(a.input_tokens > 0 for a in stored if a.status == "ok")
    assert_failures_are_errors(project, cases, "all_at_once")

    # Scoring again computes nothing and calls nobody.
    again = score(project, labels_path, "all_at_once", fake_llm)
    assert again["computed"] == 0 and fake_llm.call_count == 8
    assert {k: v for k, v in again.items() if k != "computed"} == {k: v for k, v in report.items() if k != "computed"}


def test_step_by_step_scored_against_the_labels(project, whowhen_slice, fake_llm):
    cases, labels_path = whowhen_slice
    fake_llm.script(default=step_by_step_reply(cases))
    report = score(project, labels_path, "step_by_step", fake_llm)

    by_plan = {case.plan: case for case in cases.values()}
    wrong = by_plan["wrong"]
    wrong_gap = abs(wrong.other_agent_turn().index - wrong.label_step)
    assert (report["method"], report["count"], report["computed"]) == ("step_by_step", 6, 6)
    assert report["agent_accuracy"] == round(2 / 6, 4)  # the two right ones; "near" is inconclusive
    assert report["step_accuracy"] == round(2 / 6, 4)
    assert report["step_within_1"] == round((2 + (wrong_gap <= 1)) / 6, 4)
    assert report["step_within_3"] == round((2 + (wrong_gap <= 3)) / 6, 4)
    assert (report["errors"], report["inconclusive"]) == (2, 1)
    assert_baselines(report)

    # k + 1 calls when step k (at position k) is named, one per step when none is, retries and repair as above.
    def position(case: Case, index: int) -> int:
        return case.step(index).position

    right = [case for case in cases.values() if case.plan == "right"]
    expected = (sum(position(case, case.label_step) + 1 for case in right) + len(by_plan["near"].steps)
                + position(wrong, wrong.other_agent_turn().index) + 1 + (1 + RETRIES) + 2)
    assert fake_llm.call_count == expected
    stored = {a.trace.trace_id: a for a in Attribution.objects.filter(project=project, method="step_by_step")
              .select_related("trace")}
    assert sum(a.calls for a in stored.values()) == expected
    near = stored[by_plan["near"].trace_id]
    assert (near.status, near.agent, near.step_index, near.calls) == ("inconclusive", "", None,
                                                                       len(by_plan["near"].steps))
    assert_failures_are_errors(project, cases, "step_by_step")

    # The baselines do not depend on the method scored.
    fake_llm.script(default=all_at_once_reply(cases))
    assert score(project, labels_path, "all_at_once", fake_llm)["baselines"] == report["baselines"]


def test_the_model_mode_benchmark_scores_the_llm_methods_beside_learned(shared_dir, fake_llm, settings):
    from benchmarks.model_mode.attribution import attribution_bench, attribution_lines, whowhen_smallest

    settings.CLEAR_JUDGE_API_KEY = "test-key"

    def reply(request: dict):
        data = payload(request)
        if "review_step" in data:
            return json.dumps({"decisive": True, "reason": "first step"})
        first = data["steps"][0]
        return json.dumps({"agent": first["agent"], "step": first["step"], "reason": "first step"})

    fake_llm.script(default=reply)
    result = attribution_bench(count=3, shared_dir=shared_dir, model=MODEL, api_base=fake_llm.api_base)
    folder = shared_dir / "datasets" / "whowhen-algorithm-generated"
    assert result["traces"] == [p.name for p in whowhen_smallest(folder=folder, count=3)] == list(PLAN)[:3]
    assert result["imported"] == 3 and set(result["baselines"]) == set(BASELINE_NAMES)
    methods = result["methods"]
    assert list(methods) == ["learned", "all_at_once", "step_by_step"]
    assert all(methods[m]["count"] == 3 and methods[m]["errors"] == 0 for m in methods)
    assert methods["learned"]["calls"] == 0
    assert methods["all_at_once"]["calls"] == methods["step_by_step"]["calls"] == 3 and fake_llm.call_count == 6
    # Both name each trace's first step, as the "first step" baseline does.
    first_step = result["baselines"]["first_step"]["step_exact"]
    assert methods["all_at_once"]["step_accuracy"] == methods["step_by_step"]["step_accuracy"] == first_step
    assert methods["all_at_once"]["input_tokens"] > 0 and methods["all_at_once"]["statuses"] == {"ok": 3}
    lines = "\n".join(attribution_lines({"off": {"attribution": result}}))
    assert "attribution (off), 3 smallest Who&When" in lines
    assert all(f"  {name} " in lines for name in ("learned", "all_at_once", "step_by_step", "baseline last_step"))
