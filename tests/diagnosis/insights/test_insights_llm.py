"""Insights from an LLM step judge's free-text critiques: the fake OpenAI-compatible server answers the step judge
with paraphrased critiques of six problems across four nodes (one judge, no titles, no rule names), so only
clustering on meaning can recover the problems; it also names the clusters."""

import json
from collections import Counter

import pytest
from sklearn.metrics import adjusted_rand_score

from diagnosis.insights.naming import NAMING_SYSTEM
from diagnosis.models import Insight, InsightEvidence, InsightStatement
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from diagnosis.services.insights import insights_build
from tests.diagnosis.insights.paraphrases import PRAISE, PROBLEMS
from tests.diagnosis.llm.helpers import data_block
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db

MODEL = "openai/gpt-4o-mini"


class ScriptedJudge:
    """Step-judge replies: per trace (numbered in the order they are judged) at most one failing LLM step per
    node, with the next paraphrase of the problem chosen for that node; every other step passes. Naming requests
    get a JSON name. `truth` records the problem of every failing span."""

    def __init__(self) -> None:
        self.traces: dict[str, int] = {}
        self.used: Counter = Counter()
        self.truth: dict[str, str] = {}
        self.naming_calls = 0

    def problem_for(self, index: int, node: str) -> str | None:
        if node == "planner":
            return "ignored_request" if index % 3 == 0 else "bad_routing" if index % 3 == 1 else None
        if node == "mediator":
            return "lost_findings" if index % 2 == 0 else None
        if node == "writer":
            return "invented_policy" if index % 3 == 2 else "wrong_language" if index % 4 == 1 else None
        if node == "billing_worker":
            return "wrong_argument" if index % 2 == 1 else None
        return None

    def __call__(self, request: dict) -> str:
        system = request["messages"][0]["content"]
        if system == NAMING_SYSTEM:
            self.naming_calls += 1
            payload = json.loads(request["messages"][1]["content"])
            return json.dumps({"title": f"LLM: {payload['medoid'][:60]}", "description": "A recurring problem.",
                               "root_cause": "The prompt of this node lacks the rule.",
                               "recommendation": f"Add the missing rule to the {payload['node'] or 'agent'} prompt."})
        data = data_block(request)
        index = self.traces.setdefault(json.dumps(data["goal"], sort_keys=True), len(self.traces))
        steps, seen_nodes = [], set()
        for step in data["steps"]:
            problem = None
            if step["kind"] == "LLM" and step["node"] not in seen_nodes:
                problem = self.problem_for(index, step["node"])
                seen_nodes.add(step["node"])
            if problem is None:
                steps.append({"span_id": step["span_id"], "critique": "The step did its job.", "score": 0.9,
                              "verdict": "pass", "issues": []})
                continue
            paraphrases = PROBLEMS[problem][1]
            text = paraphrases[self.used[problem] % len(paraphrases)]
            self.used[problem] += 1
            self.truth[step["span_id"]] = problem
            praise = PRAISE[self.used[problem] % len(PRAISE)]
            steps.append({"span_id": step["span_id"], "critique": f"{praise} However, {text[0].lower()}{text[1:]}",
                          "score": 0.2, "verdict": "fail", "issues": []})
        return json.dumps({"steps": steps})


@pytest.fixture
def judged(project, settings, fake_llm):
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_JUDGE_API_BASE = fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    support_desk_ingest(project=project, bugs="none", release="r1")
    judge = ScriptedJudge()
    fake_llm.script(default=judge)
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="r1", judges=["llm.step"],
                                                        model=MODEL, enqueue=False))
    assert run.status == "succeeded" and run.error_count == 0
    return run, judge


def _labels(run, judge, level: str):
    field = "node_insight" if level == "node" else "system_insight"
    truth, predicted = [], []
    for statement in InsightStatement.objects.filter(run=run).select_related(field):
        insight = getattr(statement, field)
        truth.append(judge.truth[statement.span_id])
        predicted.append(f"other-{statement.pk}" if insight is None or insight.is_other else insight.pk)
    return truth, predicted


def test_paraphrased_critiques_become_one_insight_per_problem(judged, project):
    run, judge = judged
    assert set(judge.truth.values()) == set(PROBLEMS) and min(judge.used.values()) >= 4
    summary = insights_build(run=run)
    assert summary["statements"] == len(judge.truth)  # praise and boilerplate dropped, one statement per critique
    assert summary["naming"]["model"] == MODEL and summary["naming"]["calls"] == judge.naming_calls > 0

    truth, predicted = _labels(run, judge, "node")
    assert Insight.objects.filter(project=project, level="node", is_other=False).count() == len(PROBLEMS)
    assert adjusted_rand_score(truth, predicted) >= 0.8
    # Each problem shows at one node: one insight per problem, no system-level twin of it.
    assert not Insight.objects.filter(project=project, level="system", is_other=False).exists()
    for problem, (node, _) in PROBLEMS.items():
        spans = [s for s, p in judge.truth.items() if p == problem]
        insight_id = Counter(InsightStatement.objects.filter(run=run, span_id__in=spans).values_list(
            "node_insight_id", flat=True)).most_common(1)[0][0]
        insight = Insight.objects.get(pk=insight_id)
        assert insight.node == node and insight.naming_source == "llm" and insight.title.startswith("LLM: ")
        assert insight.recommendation == f"Add the missing rule to the {node} prompt."
        # critique statements cite the judged span (a bare citation, verified against the stored spans)
        assert InsightEvidence.objects.filter(insight=insight, span_id__in=spans, quote="").exists()


def test_a_second_run_on_the_same_traces_calls_no_model_and_keeps_the_insights(judged, project, fake_llm):
    run, judge = judged
    insights_build(run=run)
    before = dict(Insight.objects.filter(project=project).values_list("pk", "title"))
    fake_llm.script(default=judge)
    again = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="r1", judges=["llm.step"],
                                                          model=MODEL, enqueue=False))
    summary = insights_build(run=again)
    assert fake_llm.call_count == 0 and summary["naming"]["calls"] == 0
    assert summary["new"] == 0 and dict(Insight.objects.filter(project=project).values_list("pk", "title")) == before
