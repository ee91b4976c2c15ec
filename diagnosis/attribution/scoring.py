"""Scoring attributions against Who&When-style labels (one JSON object per line: `trace_id`, `mistake_agent`,
`mistake_step`, optionally `mistake_span_id`).

Agents match case-insensitively and exactly; steps match as integers (`agent.step_index`), exactly and within ±1
and ±3. Every label whose trace is in the project counts: an attribution that failed or named nothing is wrong; an
unconfident one counts by its top candidate. `confident` scores the confident answers alone, beside the baselines
on the same runs (issue 42).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from clear.projects.models import Project
from traces.models import Trace

from .crossval import baselines_score
from .errors import AttributionInvalidError
from .models import Attribution
from .selectors import row_confident
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
    confident: dict = field(default_factory=dict)  # the confident answers alone, and the baselines on those runs

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
            "baselines": self.baselines, "confident": self.confident,
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
            row.update(agent=attribution.agent, step=attribution.step_index, status=attribution.status,
                       confident=row_confident(status=attribution.status, details=attribution.details))
            top = (attribution.details or {}).get("top") if isinstance(attribution.details, dict) else None
            if not row["confident"] and isinstance(top, dict) and top.get("agent"):
                # Every run is answered in the all-run figure: an unconfident one by its top candidate.
                row.update(agent=top["agent"], step=_step(top.get("step")))
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
    examples = _examples(project=project, labels=labels, traces=traces)
    report.baselines = baselines_score(examples)
    report.confident = _confident(report=report, examples=examples)
    return report


def _confident(*, report: ScoreReport, examples: list) -> dict:
    """{count, agent_accuracy, step_exact, step_within_3, baselines}: the confident answers alone, beside the
    label-free baselines on those same runs."""
    rows = [row for row in report.rows if row.get("confident")]
    wanted = {str(row["trace_id"]) for row in rows}
    n = len(rows)

    def share(test) -> float:
        return round(sum(1 for row in rows if test(row)) / n, 4) if n else 0.0

    def gap(row) -> int | None:
        return None if row["step"] is None or row["label_step"] is None else abs(row["step"] - row["label_step"])
    return {
        "count": n,
        "agent_accuracy": share(lambda r: bool(r["agent"]) and str(r["agent"]).strip().casefold()
                                == str(r["label_agent"] or "").strip().casefold()),
        "step_exact": share(lambda r: gap(r) == 0), "step_within_3": share(lambda r: (gap(r) or 0) <= 3
                                                                                  and gap(r) is not None),
        "baselines": baselines_score([e for e in examples if e.trace_id in wanted]) if n else {},
    }


def _examples(*, project: Project, labels: list[dict], traces: dict[str, int]) -> list:
    """The labelled traces as the baselines (baselines.py) read them: the same steps and signals the methods see."""
    from diagnosis.services.trace_view import trace_view_build

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
    return examples
