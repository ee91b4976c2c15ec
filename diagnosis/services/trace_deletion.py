"""Traces being deleted (traces/hooks.py; registered in DiagnosisConfig.ready): the diagnosis rows that counted them
are read before the database cascade removes them, and the counts corrected after it, in the deleting transaction.

The runs the traces belonged to lose them from total/done/skipped (tokens and cost stay, they were paid); every
insight that occurred in one of those runs is recomputed for it (its statements there, and the run's judged traces:
the frequency's denominator), then its headline figures and the project's trend by release. Runs still active may
have been waiting for the deleted traces: the hook names them in the trace.deleted fact, and the
`diagnosis.runs_finish_after_trace_delete` subscriber finishes those that are complete.

Expired traces (retention) correct no count; the quotes copied out of their spans go from the insights and tickets
that keep them, unless CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES (services/evidence_expiry.py).
"""

from collections import defaultdict
from collections.abc import Callable

from django.db.models import Count, F

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, InsightOccurrence, RunTrace


def traces_delete_prepare(*, project: Project, trace_pks: list[int],
                          expired: bool = False) -> Callable[[], dict | None] | None:
    """Read what counted the traces; returns what corrects the counts once they are gone (None: nothing did).
    Expired traces (retention) correct nothing: runs' counts and insights' figures stay as they were measured, and
    the tickets with them; only the active runs that may have waited for them are named, to finish. Their citations
    are frozen on the insights, and their quotes removed unless kept (services/evidence_expiry.py)."""
    from diagnosis.services.evidence_expiry import evidence_expiry_prepare

    quotes_after = evidence_expiry_prepare(project=project, trace_pks=trace_pks) if expired else None
    counts: dict = defaultdict(lambda: {"total": 0, "done": 0, "skipped": 0})
    for run_id, status, n in (RunTrace.objects.filter(trace_id__in=trace_pks).values_list("run_id", "status")
                              .annotate(n=Count("pk")).order_by()):
        counts[run_id]["total"] += n
        if status == RunTrace.Status.DONE:
            counts[run_id]["done"] += n
        elif status == RunTrace.Status.SKIPPED:
            counts[run_id]["skipped"] += n
    if not counts and quotes_after is None:
        return None
    pairs = set(InsightOccurrence.objects.filter(run_id__in=list(counts), insight__project=project)
                .values_list("insight_id", "run_id"))

    def after() -> dict | None:
        if quotes_after is not None:
            quotes_after()
        for run_id, n in ({} if expired else counts).items():
            DiagnosisRun.objects.filter(pk=run_id).update(
                total_count=F("total_count") - n["total"], done_count=F("done_count") - n["done"],
                skipped_count=F("skipped_count") - n["skipped"])
        if pairs and not expired:
            _insights_recount(project=project, pairs=pairs)
        active = DiagnosisRun.objects.filter(pk__in=list(counts), status__in=DiagnosisRun.ACTIVE)
        # The deleted traces may have been the last ones a run was waiting for.
        runs = sorted(str(pk) for pk in active.values_list("pk", flat=True))
        return {"active_runs": runs} if runs else None

    return after


def _insights_recount(*, project: Project, pairs: set[tuple]) -> None:
    from diagnosis.insights.recompute import headline_refresh, occurrence_recompute
    from diagnosis.insights.trend import trend_refresh
    from diagnosis.models import Insight

    # The project's lock before the insights' rows, in the order an insights build takes them (services/insights.py),
    # since trend_refresh below takes it too.
    Project.objects.select_for_update().filter(pk=project.pk).first()
    insights = Insight.objects.in_bulk({insight_id for insight_id, _ in pairs})
    runs = DiagnosisRun.objects.in_bulk({run_id for _, run_id in pairs})
    for insight_id, run_id in sorted(pairs, key=str):
        occurrence_recompute(insight=insights[insight_id], run=runs[run_id])
    for insight in insights.values():
        headline_refresh(insight=insight)
        insight.save()
    trend_refresh(project_id=project.pk)
