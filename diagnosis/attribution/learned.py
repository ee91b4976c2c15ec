"""The learned attribution method (issues 29, 42): the heuristic's pieces of evidence, transferable features and the
trace's structure, weighed by a logistic model over steps or by a few fixed weights, whichever setting leaving one
dataset out chose (crossval.py, benchmarks/attribution/loo.py).

Each step of a failed trace is a row of features read from the trace alone, never from labels: the heuristic's
evidence kept apart by kind (heuristic.step_evidence: position prior, judges' verdicts, errors, invented data, the
final answer's provenance, ...) and summed (the heuristic's score), the transferable features of transfer.py (the
step that issued a failing call or the first write, hand-offs, the earliest failed decision, ...), where the step sits
(first, last, relative position, before or after the first failing verdict), who speaks (the agent's share of turns, most active, last), and what the step is (an actor turn or a
tool result, its length, whether it carries code). The model scores every step; the highest is the decisive step.
The agent is that step's agent, or the agent whose steps hold the most probability (`agent_mode`).

Confidence (issue 42): when several agents speak, the blamed agent's lead over the runner-up in the model's weight
(each agent's share: its turns and the calls they issued); when one does, the top step's lead over the second. A lead
transfers better between systems than a share, which shrinks with the number of agents and steps. Under the
model's threshold the answer is "no confident answer": the top candidates with the evidence for each, never a
single blamed agent (the insight page, ticket and API say so).

The shipped model (learned_model.json) and every setting (a fitted logistic model's columns, regularisation and agent
mode, or a fixed-weight scorer's weights; the thresholds) are chosen leaving one dataset out
(benchmarks/attribution/loo.py): the setting with the best worst left-out score, for all the dev datasets, each
weighing the same; `python -m benchmarks.attribution --leave-one-dataset-out --write-model`.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .baselines import baseline_answers, first_failing_step
from .heuristic import EVIDENCE_KINDS, TRIVIAL, FeedbackSignal, step_evidence_and_reasons
from .steps import Step, author
from .transfer import TRANSFER, transfer_evidence, transfer_rows

MODEL_PATH = Path(__file__).with_name("learned_model.json")
_CODE = re.compile(r"```|\bdef |\bimport ")
STRUCTURE = ("relative_position", "log_position", "is_first", "is_first_actor", "is_last_actor", "is_actor",
             "is_trivial", "agent_share", "agent_most_active", "agent_is_last", "agent_first_turn", "first_fail",
             "after_first_fail", "text_length", "has_code")
# The heuristic's total beside its parts: evidence a training set never shows (an LLM judge's root cause, when the set
# was judged by rules only) still counts, at the heuristic's weight times the total's learned coefficient.
FEATURES = tuple(f"evidence_{kind}" for kind in EVIDENCE_KINDS) + ("heuristic_score",) + STRUCTURE + TRANSFER
# The columns a model may be fit on (a setting chosen leaving one dataset out): everything; without what was designed
# while reading Who&When's texts (invented data, provenance, code, text length); without the heuristic's evidence.
_TEXT = {"evidence_fabrication", "evidence_fabrication_later", "evidence_assumption", "evidence_unsupported",
         "evidence_provenance", "evidence_provenance_final", "text_length", "has_code"}
FEATURE_SETS = {
    "all": FEATURES,
    "no_text": tuple(f for f in FEATURES if f not in _TEXT),
    "no_heuristic": tuple(f for f in FEATURES if not f.startswith("evidence_") and f != "heuristic_score"),
}
CANDIDATES = 3  # candidates (agents, or steps of a single-agent trace) an attribution names with their evidence


@dataclass(slots=True)
class Example:
    """One failed trace as the learned method sees it: its steps, their feature rows and evidence in words, the
    baselines' answers, and (for fitting and scoring only) the label."""

    trace_id: str
    group: str  # the task: folds never split one
    steps: list[Step]
    rows: list[list[float]]
    baselines: dict[str, str | int | None]
    label_agent: str | None = None
    label_step: int | None = None
    evidence: dict[int, list[str]] = field(default_factory=dict)  # position -> evidence in words
    weight: float = 1.0  # in a fit over several datasets, each dataset weighs the same

    @property
    def agents(self) -> list[str]:
        return list(dict.fromkeys(s.agent for s in self.steps if s.is_actor))


@dataclass(slots=True)
class Prediction:
    """The answer: the agent and step, a confidence (the agent's lead over the runner-up in the model's weight when
    several agents speak, the top step's lead when one does) and whether it reaches the model's threshold. Unconfident, `agent` and
    `step` are the top candidate (for scoring every run); the product shows `candidates` instead."""

    agent: str | None
    step: Step | None
    confidence: float
    low_confidence: bool
    reason: str = ""
    candidates: list[dict] = field(default_factory=list)  # [{agent, step, span_id, share, evidence: [...]}]
    evidence: list[str] = field(default_factory=list)  # what the confident answer weighed
    step_share: float = 0.0  # the top step's lead (a step threshold's measure, also on multi-agent traces)

    @property
    def confident(self) -> bool:
        return not self.low_confidence


def feature_rows(*, steps: list[Step], goal: str = "", signals: list[FeedbackSignal] | None = None,
                 trace=None) -> list[list[float]]:
    """One row of FEATURES per step, in step order (`trace`: the TraceView, for which step issued which call)."""
    return _rows_and_evidence(steps=steps, goal=goal, signals=signals, trace=trace)[0]


def _rows_and_evidence(*, steps: list[Step], goal: str, signals: list[FeedbackSignal] | None,
                       trace=None) -> tuple[list[list[float]], dict[int, list[str]]]:
    signals = signals or []
    evidence, reasons = step_evidence_and_reasons(steps=steps, goal=goal, signals=signals)
    actors = [s for s in steps if s.is_actor]
    counts = Counter(s.agent for s in actors)
    most_active = max(counts.values(), default=0)
    last_agent = actors[-1].agent if actors else ""
    first_actor = actors[0].position if actors else -1
    last_actor = actors[-1].position if actors else -1
    failing = first_failing_step(steps, signals)
    fail_position = failing.position if failing else None
    by_span = {step.span_id: step.position for step in steps}
    failing_positions = [by_span[s] for signal in signals if signal.verdict == "fail"
                         for s in ([signal.span_id] if signal.span_id in by_span else signal.evidence_span_ids[:1])
                         if s in by_span]
    transfer = transfer_rows(steps=steps, trace=trace, failing_positions=failing_positions)
    seen_agents: set[str] = set()
    n = len(steps)
    rows, words = [], {}
    for step, extra in zip(steps, transfer):
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
        rows.append(parts + [sum(parts)] + structure + extra)
        words[step.position] = list(dict.fromkeys(reasons.get(step.position, []) + transfer_evidence(extra)))
    return rows, words


def example_build(*, trace_id: str, group: str, steps: list[Step], goal: str, signals: list[FeedbackSignal],
                  label_agent: str | None = None, label_step: int | None = None, trace=None) -> Example:
    rows, words = _rows_and_evidence(steps=steps, goal=goal, signals=signals, trace=trace)
    return Example(trace_id=trace_id, group=group or trace_id, steps=steps, rows=rows, evidence=words,
                   baselines=baseline_answers(steps=steps, signals=signals), label_agent=label_agent,
                   label_step=label_step)


@dataclass
class Model:
    """A fitted scorer with its settings; serialisable to JSON (learned_model.json). `features`: the columns it was
    fit on (a subset of FEATURES); `threshold_agent` / `threshold_step`: the least confidence of a confident answer
    on a trace where several agents / one agent speak."""

    coef: list[float]
    intercept: float
    mean: list[float]
    scale: list[float]
    features: list[str] = field(default_factory=lambda: list(FEATURES))
    agent_mode: str = "step"  # "step" | "sum"
    threshold_agent: float = 0.0
    threshold_step: float = 0.0
    settings: dict = field(default_factory=dict)
    trained_on: str = ""

    def scores(self, rows: list[list[float]]) -> list[float]:
        columns = [FEATURES.index(name) for name in self.features]
        out = []
        for row in rows:
            z = self.intercept + sum(c * (row[i] - m) / s for c, i, m, s in zip(self.coef, columns, self.mean,
                                                                                 self.scale))
            out.append(1 / (1 + math.exp(-max(-50.0, min(50.0, z)))))
        return out

    def shares(self, example: Example) -> tuple[list[float], dict[str, float]]:
        """Each step's share of the model's weight, and each agent's (its turns' and the calls they issued)."""
        probabilities = self.scores(example.rows)
        total = sum(probabilities) or 1.0
        shares = [p / total for p in probabilities]
        by_agent: dict[str, float] = defaultdict(float)
        for step, share in zip(example.steps, shares):
            by_agent[author(example.steps, step.position).agent] += share
        return shares, dict(by_agent)

    def predict(self, example: Example, *, threshold_agent: float | None = None,
                threshold_step: float | None = None) -> Prediction:
        steps = example.steps
        if not steps:
            return Prediction(agent=None, step=None, confidence=0.0, low_confidence=True, reason="no steps")
        shares, by_agent = self.shares(example)
        order = sorted(range(len(steps)), key=lambda i: (-shares[i], i))
        best = order[0]
        first_seen = {s.agent: s.position for s in reversed(steps)}
        agents = sorted(by_agent, key=lambda a: (-by_agent[a], first_seen.get(a, 0)))
        several = len(example.agents) > 1
        if several:
            agent = agents[0] if self.agent_mode == "sum" else author(steps, best).agent
            runner_up = max((share for name, share in by_agent.items() if name != agent), default=0.0)
            confidence = by_agent.get(agent, 0.0) - runner_up
            # the agent's best step (its own turn, or the turn that issued its best-scored call)
            step = author(steps, next(i for i in order if author(steps, i).agent == agent))
            threshold = self.threshold_agent if threshold_agent is None else threshold_agent
            candidates = [self._candidate(example, shares, a, by_agent[a], order) for a in agents[:CANDIDATES]]
        else:
            step = author(steps, best)
            agent, confidence = step.agent, shares[best] - (shares[order[1]] if len(order) > 1 else 0.0)
            threshold = self.threshold_step if threshold_step is None else threshold_step
            candidates = [{"agent": steps[i].agent, "step": steps[i].index, "span_id": steps[i].span_id,
                           "share": round(shares[i], 3), "evidence": example.evidence.get(i, [])[:4]}
                          for i in order[:CANDIDATES]]
        confidence = round(min(1.0, max(0.0, confidence)), 3)
        # the step threshold's measure on every trace (chosen on multi-agent ones too): the top step's lead
        step_share = round(shares[best] - (shares[order[1]] if len(order) > 1 else 0.0), 3)
        evidence = example.evidence.get(step.position, [])[:4]
        if confidence < threshold:
            names = ", ".join(f"{c['agent']} ({c['share']:.0%})" for c in candidates)
            return Prediction(agent=agent, step=step, confidence=confidence, low_confidence=True,
                              step_share=step_share, reason=f"no confident answer ({confidence:.2f} < {threshold:.2f}): the candidates are "
                                     f"{names}", candidates=candidates)
        why = "; ".join(evidence[:3]) or "where the model's weight is"
        return Prediction(agent=agent, step=step, confidence=confidence, low_confidence=False, candidates=candidates,
                          step_share=step_share, reason=f"{step.label}: {confidence:.0%} of the model's weight; {why}", evidence=evidence)

    @staticmethod
    def _candidate(example: Example, shares: list[float], agent: str, share: float, order: list[int]) -> dict:
        position = next((i for i in order if author(example.steps, i).agent == agent), order[0])
        step = author(example.steps, position)
        return {"agent": agent, "step": step.index, "span_id": step.span_id, "share": round(share, 3),
                "evidence": list(dict.fromkeys(example.evidence.get(step.position, [])
                                               + example.evidence.get(position, [])))[:4]}

    def as_dict(self) -> dict:
        return {"features": list(self.features), "coef": self.coef, "intercept": self.intercept, "mean": self.mean,
                "scale": self.scale, "agent_mode": self.agent_mode, "threshold_agent": self.threshold_agent,
                "threshold_step": self.threshold_step, "settings": self.settings, "trained_on": self.trained_on}

    @classmethod
    def from_dict(cls, data: dict) -> Model:
        features = list(data.get("features") or [])
        if not features or any(name not in FEATURES for name in features) or len(features) != len(data["coef"]):
            raise ValueError("the stored model was fit on other features; refit it (python -m benchmarks.attribution "
                             "--leave-one-dataset-out --write-model)")
        return cls(coef=list(data["coef"]), intercept=float(data["intercept"]), mean=list(data["mean"]),
                   scale=list(data["scale"]), features=features, agent_mode=data.get("agent_mode", "step"),
                   threshold_agent=float(data.get("threshold_agent", 0.0)),
                   threshold_step=float(data.get("threshold_step", 0.0)), settings=data.get("settings") or {},
                   trained_on=data.get("trained_on", ""))


# A weighted sum read as a softmax: sigmoid(z - OFFSET) is exp(z - OFFSET) to a fraction of a percent while z is
# well under OFFSET, so the shares over a trace's steps are a softmax of the weighted evidence.
OFFSET = 30.0


def weights_model(*, weights: dict[str, float], agent_mode: str = "sum", sharpness: float = 1.0,
                  threshold_agent: float = 0.0, threshold_step: float = 0.0, trained_on: str = "") -> Model:
    """A scorer with fixed weights on a few columns (no standardising): the heuristic's evidence and transferable
    features, weighed by a setting chosen leaving one dataset out rather than fitted coefficient by coefficient.
    `sharpness` multiplies every weight: how much one unit of evidence outweighs a step with none in the softmax.
    At 1 an agent's many unremarkable steps together can outweigh another's one step that carries the evidence;
    the order of the steps never changes with it, the agents' shares and the leads (confidence) do."""
    names = [name for name, weight in weights.items() if weight]
    return Model(coef=[float(weights[name]) * sharpness for name in names], intercept=-OFFSET,
                 mean=[0.0] * len(names), scale=[1.0] * len(names), features=names, agent_mode=agent_mode,
                 threshold_agent=threshold_agent, threshold_step=threshold_step,
                 settings={"weights": {n: weights[n] for n in names}, "agent_mode": agent_mode,
                           "sharpness": sharpness, "threshold_agent": threshold_agent,
                           "threshold_step": threshold_step},
                 trained_on=trained_on)


@lru_cache(maxsize=1)
def shipped_model() -> Model:
    return Model.from_dict(json.loads(MODEL_PATH.read_text()))


def model_fit(examples: list[Example], *, c: float, agent_mode: str = "sum", features: str = "all",
              threshold_agent: float = 0.0, threshold_step: float = 0.0, trained_on: str = "",
              **_ignored) -> Model:
    """Fit the step scorer on labelled examples (a trace whose labelled step is not among its steps adds negatives
    only). Each example weighs the same whatever its length: a long trace's many negatives do not drown a short one."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    names = FEATURE_SETS[features]
    columns = [FEATURES.index(name) for name in names]
    x, y, w = [], [], []
    for example in examples:
        for step, row in zip(example.steps, example.rows):
            x.append([row[i] for i in columns])
            y.append(int(example.label_step is not None and step.index == example.label_step))
            w.append(example.weight / max(1, len(example.steps)))
    matrix = np.array(x, dtype=float)
    mean = matrix.mean(axis=0)
    scale = matrix.std(axis=0)
    scale[scale == 0] = 1.0
    targets = np.array(y)
    if targets.min() == targets.max():
        coef, intercept = [0.0] * len(names), 0.0
    else:
        weights = np.array(w) * len(w) / sum(w)
        fitted = LogisticRegression(C=c, max_iter=3000).fit((matrix - mean) / scale, targets, sample_weight=weights)
        coef, intercept = [float(v) for v in fitted.coef_[0]], float(fitted.intercept_[0])
    return Model(coef=coef, intercept=intercept, mean=[float(v) for v in mean], scale=[float(v) for v in scale],
                 features=list(names), agent_mode=agent_mode, threshold_agent=threshold_agent,
                 threshold_step=threshold_step,
                 settings={"c": c, "agent_mode": agent_mode, "features": features, "threshold_agent": threshold_agent,
                           "threshold_step": threshold_step}, trained_on=trained_on)
