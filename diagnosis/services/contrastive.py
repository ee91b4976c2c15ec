"""The contrastive judge's run-level step (diagnosis/judges/contrastive.py): once every trace of a run is judged and
before its insights are built, compare the run's failing and succeeding traces and write the findings as Feedback.

Called by `run_finish_if_complete` (services/runs.py) before the run is marked finished, on the worker that finished
the last trace or in-process (`diagnose --inline`, eager tests), so the findings are there when the insights build
reads the run's feedback, on both paths. Its report (status, reason when skipped, the findings and their numbers) is
kept in `run.config["contrastive"]`; its presence is what makes the step run once. A run it cannot judge (outcomes
unknown or too few, a continuous run, too many traces) records why it was skipped, and the run's summary says so.
"""

from __future__ import annotations

import logging

from django.db import transaction

from diagnosis import conf
from diagnosis.judges.contrastive import (
    CONTRASTIVE_JUDGE,
    CONTRASTIVE_VERSION,
    ContrastiveReport,
    contrastive_findings,
    contrastive_results,
)
from diagnosis.models import DiagnosisRun, RunTrace
from diagnosis.services.evidence import evidence_verify
from diagnosis.services.judging import feedback_write, run_totals_add
from diagnosis.services.trace_view import trace_view_build

logger = logging.getLogger(__name__)

REPORT_KEY = "contrastive"
_JUDGED = (DiagnosisRun.Status.RUNNING, DiagnosisRun.Status.BUDGET_EXHAUSTED)


def _skipped(reason: str) -> ContrastiveReport:
    return ContrastiveReport(status="skipped", reason=reason)


def _record(*, run_id, report: ContrastiveReport, results: dict, views: dict) -> dict | None:
    """Write the findings' Feedback and the report under the run row's lock, unless another process did."""
    with transaction.atomic():
        run = DiagnosisRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or REPORT_KEY in (run.config or {}):
            return None
        summary = report.as_dict()
        summary["feedback"] = 0
        for trace_id, trace_results in results.items():
            view, trace_pk = views[trace_id]
            dropped = {i: evidence_verify(trace=view, results=[r]) for i, r in enumerate(trace_results)}
            totals = feedback_write(run=run, trace_pk=trace_pk, trace_id=trace_id, results=trace_results,
                                    dropped={i: n for i, n in dropped.items() if n}, rubric_ids=set())
            run_totals_add(run=run, totals=totals)
            summary["feedback"] += totals.created
        config = {**(run.config or {}), REPORT_KEY: summary}
        DiagnosisRun.objects.filter(pk=run.pk).update(config=config)
    return summary


def contrastive_run_judge(*, run_id) -> dict | None:
    """Run the contrastive judge over a run whose traces are all judged, once. Returns the report recorded now, or
    None when the run does not use the judge, is not ready, or has it already."""
    run = DiagnosisRun.objects.filter(pk=run_id).only("judges", "config", "status", "continuous").first()
    if run is None or CONTRASTIVE_JUDGE not in (run.judges or []) or REPORT_KEY in (run.config or {}):
        return None
    if run.status not in _JUDGED:
        return None
    if RunTrace.objects.filter(run_id=run_id, status__in=RunTrace.OPEN).exists():
        return None
    views: dict[str, tuple] = {}
    if run.continuous:
        report = _skipped("a continuous run has no fixed set of traces to compare; start a run over a release")
    else:
        items = RunTrace.objects.filter(run_id=run_id, status=RunTrace.Status.DONE,
                                        trace__outcome__in=("success", "failure")).select_related("trace")
        limit = conf.contrastive_max_traces()
        count = items.count()
        if count > limit:
            report = _skipped(f"{count} traces with an outcome is more than CLEAR_CONTRASTIVE_MAX_TRACES ({limit}); "
                              "diagnose a smaller selection or raise the limit")
        else:
            for item in items.order_by("pk"):
                views[item.trace.trace_id] = (trace_view_build(trace=item.trace), item.trace_id)
            judged = RunTrace.objects.filter(run_id=run_id, status=RunTrace.Status.DONE).count()
            report = contrastive_findings([view for view, _ in views.values()],
                                          min_support=conf.contrastive_min_support(), fdr=conf.contrastive_fdr())
            if report.status == "skipped" and judged > count:
                report.reason += f"; {judged - count} judged trace(s) have no outcome (clear.outcome on the root span)"
    results = contrastive_results(report) if report.status == "ok" else {}
    summary = _record(run_id=run_id, report=report, results=results, views=views)
    if summary is not None:
        logger.info("diagnosis.contrastive run=%s status=%s findings=%d feedback=%d version=%s", run_id,
                    summary["status"], len(summary["findings"]), summary["feedback"], CONTRASTIVE_VERSION)
    return summary


def contrastive_run_judge_safely(*, run_id) -> None:
    """The call site's form: a broken run-level judge is recorded on the run, never stops it from finishing."""
    try:
        contrastive_run_judge(run_id=run_id)
    except Exception as exc:  # derived findings: the per-trace feedback stands on its own
        logger.exception("diagnosis.contrastive_failed run=%s", run_id)
        report = ContrastiveReport(status="error", reason=f"{type(exc).__name__}: {exc}"[:500])
        try:
            _record(run_id=run_id, report=report, results={}, views={})
        except Exception:
            logger.exception("diagnosis.contrastive_record_failed run=%s", run_id)
