"""Nested cross-validation of the learned attribution method (issue 29), folds by task.

Outer folds report; inner folds (within each outer training part) choose the settings (regularisation, how the agent
is read, the low-confidence threshold) by agent + exact-step accuracy. Only the outer folds' figures are the method's
figures; the model refit on everything and scored on what it was fit on is printed beside them as "fit", so the gap
says how much of a figure is memory. Baselines are scored on the same traces (they fit nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

from .baselines import AGENT_BASELINES, STEP_BASELINES
from .learned import Example, Model, model_fit

GRID = {"c": (0.03, 0.3, 3.0), "agent_mode": ("step", "sum"), "threshold": (0.0, 0.15, 0.3)}


@dataclass
class Score:
    count: int = 0
    agent: int = 0
    step_exact: int = 0
    step_within_1: int = 0
    step_within_3: int = 0
    low_confidence: int = 0

    def add(self, example: Example, agent: str | None, step: int | None, low: bool = False) -> None:
        self.count += 1
        self.agent += bool(agent) and str(agent).casefold() == str(example.label_agent or "").casefold()
        if step is not None and example.label_step is not None:
            gap = abs(step - example.label_step)
            self.step_exact += gap == 0
            self.step_within_1 += gap <= 1
            self.step_within_3 += gap <= 3
        self.low_confidence += low

    def rates(self) -> dict:
        n = max(1, self.count)
        return {"count": self.count, "agent": round(self.agent / n, 4), "step_exact": round(self.step_exact / n, 4),
                "step_within_1": round(self.step_within_1 / n, 4), "step_within_3": round(self.step_within_3 / n, 4),
                "low_confidence": self.low_confidence}

    @property
    def objective(self) -> float:
        return (self.agent + self.step_exact) / max(1, self.count)


def model_score(model: Model, examples: list[Example]) -> Score:
    score = Score()
    for example in examples:
        prediction = model.predict(example)
        score.add(example, prediction.agent, prediction.step.index if prediction.step else None,
                  prediction.low_confidence)
    return score


def baselines_score(examples: list[Example]) -> dict[str, dict]:
    """baseline name -> its rates (agent baselines score agents, step baselines steps)."""
    out = {}
    for name in AGENT_BASELINES + STEP_BASELINES:
        score = Score()
        for example in examples:
            answer = example.baselines.get(name)
            if name in AGENT_BASELINES:
                score.add(example, answer if isinstance(answer, str) else None, None)
            else:
                score.add(example, None, answer if isinstance(answer, int) else None)
        out[name] = score.rates()
    return out


def folds(examples: list[Example], k: int) -> list[tuple[list[Example], list[Example]]]:
    """k folds by group (task), groups dealt in a fixed order so a run is reproducible."""
    groups = sorted({e.group for e in examples})
    k = max(2, min(k, len(groups)))
    fold_of = {group: i % k for i, group in enumerate(groups)}
    return [([e for e in examples if fold_of[e.group] != i], [e for e in examples if fold_of[e.group] == i])
            for i in range(k)]


def settings_choose(examples: list[Example], *, inner: int) -> dict:
    """The grid point with the best mean inner-fold objective (ties: the first in grid order, the simplest)."""
    best, best_value = None, -1.0
    inner_folds = folds(examples, inner)
    for c, agent_mode, threshold in product(*GRID.values()):
        value = 0.0
        for train, test in inner_folds:
            model = model_fit(train, c=c, agent_mode=agent_mode, threshold=threshold)
            value += model_score(model, test).objective
        if value > best_value + 1e-9:
            best, best_value = {"c": c, "agent_mode": agent_mode, "threshold": threshold}, value
    return best


@dataclass
class NestedReport:
    outer: Score = field(default_factory=Score)
    per_fold: list[dict] = field(default_factory=list)
    fit: dict = field(default_factory=dict)
    baselines: dict = field(default_factory=dict)
    chosen: dict = field(default_factory=dict)  # the settings chosen on all examples (for the shipped model)

    def as_dict(self) -> dict:
        return {"outer": self.outer.rates(), "per_fold": self.per_fold, "fit": self.fit, "baselines": self.baselines,
                "chosen": self.chosen}


def nested_cross_validation(examples: list[Example], *, outer: int = 5, inner: int = 4,
                            trained_on: str = "") -> tuple[NestedReport, Model]:
    """Outer folds by task report; returns the report and the model refit on every example with settings chosen
    by cross-validation over all of them (what is shipped, scored as "fit")."""
    report = NestedReport(baselines=baselines_score(examples))
    for i, (train, test) in enumerate(folds(examples, outer)):
        chosen = settings_choose(train, inner=inner)
        model = model_fit(train, **chosen)
        fold = model_score(model, test)
        for name in ("count", "agent", "step_exact", "step_within_1", "step_within_3", "low_confidence"):
            setattr(report.outer, name, getattr(report.outer, name) + getattr(fold, name))
        report.per_fold.append({"fold": i, "settings": chosen, **fold.rates()})
    report.chosen = settings_choose(examples, inner=inner)
    final = model_fit(examples, **report.chosen, trained_on=trained_on)
    report.fit = model_score(final, examples).rates()
    return report, final
