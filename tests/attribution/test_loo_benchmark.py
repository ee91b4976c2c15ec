"""The leave-one-dataset-out benchmark's pieces that need no database: equal weights and the issue-42 bar."""

from diagnosis.attribution.learned import Prediction, example_build
from diagnosis.attribution.steps import Step

from benchmarks.attribution.loo import _evaluate


def _example(trace_id: str, *, label_agent: str, label_step: int):
    steps = [Step(position=i, index=i, span_id=f"{trace_id}-{i}", agent=agent, kind="LLM", status="ok",
                  text=f"turn {i}") for i, agent in enumerate(("planner", "worker", "worker", "writer"))]
    return example_build(trace_id=trace_id, group=trace_id, steps=steps, goal="", signals=[],
                         label_agent=label_agent, label_step=label_step)


class _Fixed:
    """A model answering from a table: trace id -> (agent, step index, confident)."""

    def __init__(self, answers):
        self.answers = answers

    def predict(self, example):
        agent, index, confident = self.answers[example.trace_id]
        return Prediction(agent=agent, step=example.steps[index], confidence=1.0 if confident else 0.1,
                          low_confidence=not confident)


def test_bar_needs_enough_confident_answers_above_the_best_baseline() -> None:
    # The most active agent (worker) is right on 2 of 4 runs; the planner is right on the other two.
    examples = [_example(f"t{i}", label_agent=agent, label_step=0 if agent == "planner" else 1)
                for i, agent in enumerate(("planner", "planner", "worker", "worker"))]
    right = _Fixed({"t0": ("planner", 0, True), "t1": ("planner", 0, True), "t2": ("worker", 1, False),
                    "t3": ("worker", 1, False)})
    score = _evaluate(right, examples, "agent")
    assert score["all"]["agent"] == 1.0 and score["best_baseline_value"] == 0.5
    assert score["confident_share"] == 0.5 and score["best_baseline_confident_value"] == 0.0
    assert score["passes"] and score["margin"] == 0.55  # the worse of all runs (1.0 vs 0.5 - 0.05) and confident (0.95)
    # Right everywhere but confident on one run of four: below the 30% share.
    shy = _Fixed({**right.answers, "t1": ("planner", 0, False)})
    assert not _evaluate(shy, examples, "agent")["passes"]
    # Confident and wrong: the confident answers do not clear the baseline.
    wrong = _Fixed({key: ("writer", 3, True) for key in right.answers})
    assert not _evaluate(wrong, examples, "agent")["passes"]
