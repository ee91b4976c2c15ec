"""The end of a trace's life: an outcome set by the API, deletion (API, UI, retention) and what counted the trace.

Deleting a trace removes its spans, scores, feedback, insight statements and evidence (database cascade) and takes
it out of the counts that included it: the diagnosis runs it belonged to (total/done/skipped; tokens and cost stay,
they were paid) and the insights of those runs (per-run occurrence, headline figures, trend). Every deletion goes
through `traces_delete`.
"""

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone

from clear.errors import ClearError
from clear.projects.models import Project
from traces.models import Trace

logger = logging.getLogger(__name__)

RETENTION_BATCH = 500


class TraceOutcomeInvalidError(ClearError):
    code = "outcome_invalid"


def trace_outcome_set(*, trace: Trace, outcome: str | None = None, score: float | None = None) -> Trace:
    """Record the caller's verdict on a trace. It replaces the outcome and score taken from the root span or a
    score (source "api"), and later spans or scores no longer change it (ingest and finalize respect "api")."""
    if outcome is None and score is None:
        raise TraceOutcomeInvalidError("Send an outcome (success or failure), a score from 0 to 1, or both.")
    if outcome is not None and outcome not in Trace.Outcome.values:
        raise TraceOutcomeInvalidError(f"The outcome is success or failure, not {outcome!r}.")
    if score is not None and not 0 <= score <= 1:
        raise TraceOutcomeInvalidError(f"The score is a number from 0 to 1, not {score}.")
    if outcome is None:
        outcome = Trace.Outcome.SUCCESS if score >= 0.5 else Trace.Outcome.FAILURE  # as an outcome score reads
    with transaction.atomic():
        # Finalisation holds this row's lock while it derives the outcome; wait for it instead of racing it.
        locked = Trace.objects.select_for_update().get(pk=trace.pk)
        locked.outcome, locked.score, locked.outcome_source = outcome, score, "api"
        locked.save(update_fields=["outcome", "score", "outcome_source"])
    return locked


def trace_delete(*, project: Project, trace: Trace) -> None:
    """Delete one trace of `project` and everything derived from it (the API and the UI call this)."""
    traces_delete(project=project, trace_pks=[trace.pk])


def traces_delete(*, project: Project, trace_pks: list[int]) -> int:
    """Delete traces of `project` by primary key, with their derived data, in one transaction; returns how many."""
    from diagnosis.models import DiagnosisRun, RunTrace

    with transaction.atomic():
        pks = list(Trace.objects.select_for_update().filter(project=project, pk__in=trace_pks)
                   .order_by("pk").values_list("pk", flat=True))
        if not pks:
            return 0
        recount = _insights_recount_prepare(project=project, trace_pks=pks)
        counts: dict = defaultdict(lambda: {"total": 0, "done": 0, "skipped": 0})
        for run_id, status, n in (RunTrace.objects.filter(trace_id__in=pks).values_list("run_id", "status")
                                  .annotate(n=Count("pk")).order_by()):
            counts[run_id]["total"] += n
            if status == RunTrace.Status.DONE:
                counts[run_id]["done"] += n
            elif status == RunTrace.Status.SKIPPED:
                counts[run_id]["skipped"] += n
        Trace.objects.filter(pk__in=pks).delete()
        for run_id, n in counts.items():
            DiagnosisRun.objects.filter(pk=run_id).update(
                total_count=F("total_count") - n["total"], done_count=F("done_count") - n["done"],
                skipped_count=F("skipped_count") - n["skipped"])
        if recount is not None:
            recount()
        active = list(DiagnosisRun.objects.filter(pk__in=list(counts), status__in=DiagnosisRun.ACTIVE)
                      .values_list("pk", flat=True))
        if active:
            # The deleted traces may have been the last ones a run was waiting for.
            transaction.on_commit(lambda: _runs_finish_if_complete(active))
    logger.info("traces.deleted project=%s traces=%d runs=%d", project.pk, len(pks), len(counts))
    return len(pks)


def _runs_finish_if_complete(run_ids: list) -> None:
    from diagnosis.services.runs import run_finish_if_complete

    for run_id in run_ids:
        run_finish_if_complete(run_id=run_id)


def _insights_recount_prepare(*, project: Project, trace_pks: list[int]):
    """What insights counted these traces, read before they go; returns a callable that recounts them afterwards
    (None when nothing counted them).

    Every insight that occurred in a run which judged one of the traces is recomputed for that run (its
    statements there, and the run's judged traces — the frequency's denominator), then its headline figures and
    the project's trend by release. Uses the diagnosis app's recompute helpers (diagnosis/insights/recompute.py).
    """
    from diagnosis.models import InsightOccurrence, RunTrace

    run_ids = set(RunTrace.objects.filter(trace_id__in=trace_pks).values_list("run_id", flat=True))
    pairs = set(InsightOccurrence.objects.filter(run_id__in=run_ids, insight__project=project)
                .values_list("insight_id", "run_id"))
    if not pairs:
        return None

    def recount() -> None:
        from diagnosis.insights.recompute import headline_refresh, occurrence_recompute
        from diagnosis.insights.trend import trend_refresh
        from diagnosis.models import DiagnosisRun, Insight

        insights = Insight.objects.in_bulk({insight_id for insight_id, _ in pairs})
        runs = DiagnosisRun.objects.in_bulk({run_id for _, run_id in pairs})
        for insight_id, run_id in sorted(pairs, key=str):
            occurrence_recompute(insight=insights[insight_id], run=runs[run_id])
        for insight in insights.values():
            headline_refresh(insight=insight)
            insight.save()
        trend_refresh(project_id=project.pk)

    return recount


def traces_retention_enforce(*, now: datetime | None = None, batch: int = RETENTION_BATCH) -> int:
    """Delete every project's traces older than its `retention_days` (by the trace's start, or its arrival when it
    has no spans), `batch` traces per transaction; returns how many were deleted."""
    now = now or timezone.now()
    deleted = 0
    for project in Project.objects.filter(retention_days__isnull=False, retention_days__gt=0):
        cutoff = now - timedelta(days=project.retention_days)
        old = Trace.objects.filter(project=project, first_received_at__lt=cutoff).exclude(start_time__gte=cutoff)
        while True:
            pks = list(old.order_by("pk").values_list("pk", flat=True)[:batch])
            if not pks:
                break
            deleted += traces_delete(project=project, trace_pks=pks)
        logger.info("traces.retention project=%s days=%d", project.pk, project.retention_days)
    return deleted
