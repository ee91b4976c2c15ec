"""The learned attribution method (issue 29): the heuristic's pieces of evidence and the trace's structure, weighed by
a logistic model over steps whose form and settings were chosen by nested cross-validation (crossval.py,
benchmarks/attribution).

Each step of a failed trace is a row of features read from the trace alone, never from labels: the heuristic's
evidence kept apart by kind (heuristic.step_evidence: position prior, judges' verdicts, errors, invented data, the
final answer's provenance, ...) and summed (the heuristic's score), where the step sits (first, last, relative position, before or after the first
failing verdict), who speaks (the agent's share of turns, most active, last), and what the step is (an actor turn or a
tool result, its length, whether it carries code). The model scores every step; the highest is the decisive step.
The agent is that step's agent, or the agent whose steps hold the most probability (`agent_mode`).

Confidence is the top step's share of the probability over the trace's steps. Under `threshold` the answer is low
confidence and falls back to the baselines that did best on the data the model was fit on (baselines.py), and says
so; it is never a silent "step 1".

The shipped model (learned_model.json) is fit on the Who&When Algorithm-Generated set with the settings that nested
cross-validation chose there; `python -m benchmarks.attribution --write-model` refits it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .baselines import BASELINE_NAMES, baseline_answers, first_failing_step
from .heuristic import EVIDENCE_KINDS, TRIVIAL, FeedbackSignal, step_evidence
from .steps import Step

MODEL_PATH = Path(__file__).with_name("learned_model.json")
_CODE = re.compile(r"```|\bdef |\bimport ")
STRUCTURE = ("relative_position", "log_position", "is_first", "is_first_actor", "is_last_actor", "is_actor",
             "is_trivial", "agent_share", "agent_most_active", "agent_is_last", "agent_first_turn", "first_fail",
             "after_first_fail", "text_length", "has_code")
# The heuristic's total beside its parts: evidence a training set never shows (an LLM judge's root cause, when the set
# was judged by rules only) still counts, at the heuristic's weight times the total's learned coefficient.
FEATURES = tuple(f"evidence_{kind}" for kind in EVIDENCE_KINDS) + ("heuristic_score",) + STRUCTURE


@dataclass(slots=True)
class Example:
    """One failed trace as the learned method sees it: its steps, their feature rows, the baselines' answers, and
    (for fitting and scoring only) the label."""

    trace_id: str
    group: str  # the task: folds never split one
    steps: list[Step]
    rows: list[list[float]]
    baselines: dict[str, str | int | None]
    label_agent: str | None = None
    label_step: int | None = None


@dataclass(slots=True)
class Prediction:
    agent: str | None
    step: Step | None
    confidence: float
    low_confidence: bool
    fallback: str = ""  # the baselines it fell back to, in words
    reason: str = ""
    candidates: list[dict] = field(default_factory=list)


def feature_rows(*, steps: list[Step], goal: str = "", signals: list[FeedbackSignal] | None = None) -> list[list[float]]:
    """One row of FEATURES per step, in step order."""
    signals = signals or []
    evidence = step_evidence(steps=steps, goal=goal, signals=signals)
    actors = [s for s in steps if s.is_actor]
    counts = Counter(s.agent for s in actors)
    most_active = max(counts.values(), default=0)
    last_agent = actors[-1].agent if actors else ""
    first_actor = actors[0].position if actors else -1
    last_actor = actors[-1].position if actors else -1
    failing = first_failing_step(steps, signals)
    fail_position = failing.position if failing else None
    seen_agents: set[str] = set()
    n = len(steps)
    rows = []
    for step in steps:
        kinds = evidence.get(step.position, {})
        first_turn = step.is_actor and step.agent not in seen_agents
        if step.is_actor:
            seen_agents.add(step.agent)
        structure = [
            step.position / max(1, n - 1), math.log1p(step.position), float(step.position == 0),
            float(step.position == first_actor), float(step.position == last_actor), float(step.is_actor),
            float(step.text.strip().lower() in TRIVIAL), counts.get(step.agent, 0) / max(1, len(actors)),
            float(step.is_actor and counts.get(step.agent, 0) == most_active), float(step.agent == last_agent),
            float(first_turn), float(fail_position == step.position),
            float(fail_position is not None and step.position > fail_position), math.log1p(len(step.text)) / 10,
            float(bool(_CODE.search(step.text))),
        ]
        parts = [kinds.get(kind, 0.0) for kind in EVIDENCE_KINDS]
        rows.append(parts + [sum(parts)] + structure)
    return rows


def example_build(*, trace_id: str, group: str, steps: list[Step], goal: str, signals: list[FeedbackSignal],
                  label_agent: str | None = None, label_step: int | None = None) -> Example:
    return Example(trace_id=trace_id, group=group or trace_id, steps=steps,
                   rows=feature_rows(steps=steps, goal=goal, signals=signals),
                   baselines=baseline_answers(steps=steps, signals=signals), label_agent=label_agent,
                   label_step=label_step)


@dataclass
class Model:
    """A fitted scorer with its settings; serialisable to JSON (learned_model.json)."""

    coef: list[float]
    intercept: float
    mean: list[float]
    scale: list[float]
    agent_mode: str = "step"  # "step" | "sum"
    threshold: float = 0.0
    fallback_agent: str = "most_active_agent"
    fallback_step: str = "first_step"
    settings: dict = field(default_factory=dict)
    trained_on: str = ""

    def scores(self, rows: list[list[float]]) -> list[float]:
        out = []
        for row in rows:
            z = self.intercept + sum(c * (x - m) / s for c, x, m, s in zip(self.coef, row, self.mean, self.scale))
            out.append(1 / (1 + math.exp(-max(-50.0, min(50.0, z)))))
        return out

    def predict(self, example: Example) -> Prediction:
        steps = example.steps
        if not steps:
            return Prediction(agent=None, step=None, confidence=0.0, low_confidence=True, reason="no steps")
        unseen = [FEATURES[i] for i, (m, s) in enumerate(zip(self.mean, self.scale))
                  if FEATURES[i].startswith("evidence_") and m == 0 and s == 1.0 and any(row[i] for row in example.rows)]
        if unseen:
            return self._heuristic(example, unseen)
        probabilities = self.scores(example.rows)
        total = sum(probabilities) or 1.0
        shares = [p / total for p in probabilities]
        best = max(range(len(steps)), key=lambda i: (shares[i], -i))
        confidence = round(shares[best], 3)
        agent = steps[best].agent
        if self.agent_mode == "sum":
            by_agent: dict[str, float] = defaultdict(float)
            for step, share in zip(steps, shares):
                by_agent[step.agent] += share
            agent = max(by_agent, key=lambda a: (by_agent[a], -next(s.position for s in steps if s.agent == a)))
        ranked = sorted(range(len(steps)), key=lambda i: -shares[i])[:5]
        candidates = [{"step": steps[i].index, "span_id": steps[i].span_id, "agent": steps[i].agent,
                       "share": round(shares[i], 3)} for i in ranked]
        if confidence < self.threshold:
            fallback_agent = example.baselines.get(self.fallback_agent)
            fallback_index = example.baselines.get(self.fallback_step)
            step = next((s for s in steps if s.index == fallback_index), None)
            fallback = f"{BASELINE_NAMES[self.fallback_agent]} and {BASELINE_NAMES[self.fallback_step]}"
            return Prediction(agent=fallback_agent if isinstance(fallback_agent, str) else agent, step=step or steps[0],
                              confidence=confidence, low_confidence=True, fallback=fallback,
                              reason=f"low confidence ({confidence:.2f}): no step stands out; fell back to {fallback}",
                              candidates=candidates)
        step = steps[best]
        return Prediction(agent=agent, step=step, confidence=confidence, low_confidence=False,
                          reason=f"{step.label}: {confidence:.0%} of the model's weight over the trace's steps",
                          candidates=candidates)

    def _heuristic(self, example: Example, unseen: list[str]) -> Prediction:
        """The trace carries evidence the model was fit without (all zero in its training set, e.g. an LLM judge's
        root cause where the set was judged by rules only): the model has no weight for it, so the heuristic's
        weights (its summed score) decide, and the reason says so."""
        total = FEATURES.index("heuristic_score")
        scores = [row[total] for row in example.rows]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        confidence = round(1 / sum(math.exp(score - scores[best]) for score in scores), 3)
        step = example.steps[best]
        kinds = ", ".join(name.removeprefix("evidence_").replace("_", " ") for name in unseen)
        return Prediction(agent=step.agent, step=step, confidence=confidence, low_confidence=False,
                          reason=f"{step.label}: the trace has evidence the model was not fit on ({kinds}); the "
                                 "heuristic's weights decide")

    def as_dict(self) -> dict:
        return {"features": list(FEATURES), "coef": self.coef, "intercept": self.intercept, "mean": self.mean,
                "scale": self.scale, "agent_mode": self.agent_mode, "threshold": self.threshold,
                "fallback_agent": self.fallback_agent, "fallback_step": self.fallback_step,
                "settings": self.settings, "trained_on": self.trained_on}

    @classmethod
    def from_dict(cls, data: dict) -> Model:
        if list(data.get("features") or []) != list(FEATURES):
            raise ValueError("the stored model was fit on other features; refit it (python -m benchmarks.attribution "
                             "--write-model)")
        return cls(coef=list(data["coef"]), intercept=float(data["intercept"]), mean=list(data["mean"]),
                   scale=list(data["scale"]), agent_mode=data.get("agent_mode", "step"),
                   threshold=float(data.get("threshold", 0.0)),
                   fallback_agent=data.get("fallback_agent", "most_active_agent"),
                   fallback_step=data.get("fallback_step", "first_step"), settings=data.get("settings") or {},
                   trained_on=data.get("trained_on", ""))


@lru_cache(maxsize=1)
def shipped_model() -> Model:
    return Model.from_dict(json.loads(MODEL_PATH.read_text()))


def model_fit(examples: list[Example], *, c: float, agent_mode: str, threshold: float, trained_on: str = "") -> Model:
    """Fit the step scorer on labelled examples (a trace whose labelled step is not among its steps adds negatives
    only) and pick, on the same examples, the baselines to fall back to."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    x, y = [], []
    for example in examples:
        for step, row in zip(example.steps, example.rows):
            x.append(row)
            y.append(int(example.label_step is not None and step.index == example.label_step))
    features = np.array(x, dtype=float)
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale[scale == 0] = 1.0
    targets = np.array(y)
    if targets.min() == targets.max():
        coef, intercept = [0.0] * len(FEATURES), 0.0
    else:
        fitted = LogisticRegression(C=c, max_iter=2000).fit((features - mean) / scale, targets)
        coef, intercept = [float(v) for v in fitted.coef_[0]], float(fitted.intercept_[0])
    from .baselines import AGENT_BASELINES, STEP_BASELINES

    def hits(name: str, agent: bool) -> int:
        return sum((e.baselines.get(name) is not None and
                    (str(e.baselines[name]).casefold() == str(e.label_agent or "").casefold() if agent
                     else e.baselines[name] == e.label_step)) for e in examples)
    return Model(coef=coef, intercept=intercept, mean=[float(v) for v in mean], scale=[float(v) for v in scale],
                 agent_mode=agent_mode, threshold=threshold,
                 fallback_agent=max(AGENT_BASELINES, key=lambda n: hits(n, True)),
                 fallback_step=max(STEP_BASELINES, key=lambda n: hits(n, False)),
                 settings={"c": c, "agent_mode": agent_mode, "threshold": threshold}, trained_on=trained_on)
