"""Scoring attributions against Who&When-style labels (one JSON object per line: `trace_id`, `mistake_agent`,
`mistake_step`, optionally `mistake_span_id`).

Agents match case-insensitively and exactly; steps match as integers (`agent.step_index`), exactly and within ±1
and ±3. Every label whose trace is in the project counts: an attribution that failed or named nothing is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from clear.projects.models import Project
from traces.models import Trace

from .errors import AttributionInvalidError
from .models import Attribution
from .services import attribution_compute_for_project


@dataclass
class ScoreReport:
    method: str
    count: int = 0  # labels whose trace is in the project
    agent_correct: int = 0
    step_exact: int = 0
    step_within_1: int = 0
    step_within_3: int = 0
    errors: int = 0
    inconclusive: int = 0
    labels_without_trace: int = 0
    computed: int = 0
    rows: list[dict] = field(default_factory=list)
    baselines: dict[str, dict] = field(default_factory=dict)  # label-free baselines on the same traces

    def rate(self, value: int) -> float:
        return value / self.count if self.count else 0.0

    def as_dict(self) -> dict:
        return {
            "method": self.method, "count": self.count,
            "agent_accuracy": round(self.rate(self.agent_correct), 4),
            "step_accuracy": round(self.rate(self.step_exact), 4),
            "step_within_1": round(self.rate(self.step_within_1), 4),
            "step_within_3": round(self.rate(self.step_within_3), 4),
            "errors": self.errors, "inconclusive": self.inconclusive,
            "labels_without_trace": self.labels_without_trace, "computed": self.computed,
            "baselines": self.baselines,
        }


def labels_read(*, path: Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise AttributionInvalidError(f"No labels file at {path}.")
    labels = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            label = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AttributionInvalidError(f"{path.name} line {number} is not JSON: {exc.msg}.") from None
        if not isinstance(label, dict) or not label.get("trace_id") or "mistake_agent" not in label:
            raise AttributionInvalidError(f"{path.name} line {number} needs trace_id and mistake_agent.")
        labels.append(label)
    return labels


def _step(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def attribution_score(*, project: Project, labels: list[dict], method: str = "heuristic", compute_missing: bool = True,
                      **compute_options) -> ScoreReport:
    """Score the project's attributions by `method` against `labels`, computing the missing ones first."""
    report = ScoreReport(method=method)
    wanted = [str(label["trace_id"]) for label in labels]
    traces = {t.trace_id: t.pk for t in Trace.objects.filter(project=project, trace_id__in=wanted)}
    if compute_missing and traces:
        batch = attribution_compute_for_project(project=project, method=method, trace_ids=list(traces),
                                                **compute_options)
        report.computed = batch.computed
    found = {a.trace_id: a for a in Attribution.objects.filter(project=project, method=method,
                                                               trace_id__in=traces.values())}
    for label in labels:
        pk = traces.get(str(label["trace_id"]))
        if pk is None:
            report.labels_without_trace += 1
            continue
        report.count += 1
        attribution = found.get(pk)
        row = {"trace_id": label["trace_id"], "label_agent": label.get("mistake_agent"),
               "label_step": _step(label.get("mistake_step")), "agent": None, "step": None, "status": "missing"}
        if attribution is not None:
            row.update(agent=attribution.agent, step=attribution.step_index, status=attribution.status)
            report.errors += attribution.status == Attribution.Status.ERROR
            report.inconclusive += attribution.status == Attribution.Status.INCONCLUSIVE
        wanted_agent = str(label.get("mistake_agent") or "").strip().casefold()
        if row["agent"] and str(row["agent"]).strip().casefold() == wanted_agent:
            report.agent_correct += 1
        if row["step"] is not None and row["label_step"] is not None:
            gap = abs(row["step"] - row["label_step"])
            report.step_exact += gap == 0
            report.step_within_1 += gap <= 1
            report.step_within_3 += gap <= 3
        report.rows.append(row)
    report.baselines = _baselines(project=project, labels=labels, traces=traces)
    return report


def _baselines(*, project: Project, labels: list[dict], traces: dict[str, int]) -> dict[str, dict]:
    """The label-free baselines (baselines.py) scored against the same labels, on the same steps and signals the
    methods see; a label whose trace is missing counts as wrong for them too, as for the method."""
    from diagnosis.services.trace_view import trace_view_build

    from .crossval import baselines_score
    from .learned import example_build
    from .services import feedback_signals
    from .steps import goal_text, trace_steps

    by_pk = {t.pk: t for t in Trace.objects.filter(pk__in=list(traces.values()))}
    examples = []
    for label in labels:
        trace = by_pk.get(traces.get(str(label["trace_id"])))
        if trace is None:
            continue
        view = trace_view_build(trace=trace)
        signals, _ = feedback_signals(project=project, trace=trace, view=view)
        examples.append(example_build(trace_id=trace.trace_id, group=trace.task_id, steps=trace_steps(view),
                                      goal=goal_text(view), signals=signals, label_agent=label.get("mistake_agent"),
                                      label_step=_step(label.get("mistake_step"))))
    return baselines_score(examples)
