"""Celery entrypoints of the diagnosis app: load by id, call a service. Every task is safe to run twice."""

from celery import shared_task


@shared_task(name="diagnosis.start_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def start_diagnosis_run(run_id: str) -> None:
    from diagnosis.services import diagnosis_run_begin, diagnosis_run_fail

    try:
        diagnosis_run_begin(run_id=run_id)
    except Exception as exc:
        diagnosis_run_fail(run_id=run_id, error=f"{type(exc).__name__}: {exc}")
        raise


@shared_task(name="diagnosis.judge_trace", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, max_retries=3)
def judge_trace(self, item_id: str) -> None:
    from django.db import OperationalError

    from diagnosis.services import run_trace_fail, run_trace_process

    try:
        run_trace_process(item_id=int(item_id))
    except OperationalError as exc:  # the database went away for a moment: the work is idempotent, try again
        if self.request.retries < self.max_retries:
            raise self.retry(exc=exc, countdown=min(60, 5 * 2 ** self.request.retries)) from exc
        run_trace_fail(item_id=int(item_id), error=f"{type(exc).__name__}: {exc}")
        raise
    except Exception as exc:
        # A crash that would recur on every delivery (a bug, bad data): give up on this trace, keep the run going.
        run_trace_fail(item_id=int(item_id), error=f"{type(exc).__name__}: {exc}")
        raise


@shared_task(name="diagnosis.continuous_tick", ignore_result=True)
def continuous_diagnosis() -> None:
    from diagnosis.services import continuous_tick, diagnosis_runs_sweep

    continuous_tick()
    diagnosis_runs_sweep()
    from diagnosis.services.insights import insights_sweep

    insights_sweep()


@shared_task(name="diagnosis.build_insights", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, max_retries=3)
def build_insights(self, run_id: str) -> None:
    """Cluster a finished run's feedback into insights; claims the run, so a redelivered message does nothing."""
    from django.db import OperationalError

    from diagnosis.services.insights import insights_build_by_id

    try:
        insights_build_by_id(run_id=run_id)
    except OperationalError as exc:  # the database went away for a moment: the build claims again on retry
        if self.request.retries < self.max_retries:
            from diagnosis.models import DiagnosisRun

            DiagnosisRun.objects.filter(pk=run_id, insights_status="failed").update(insights_status="queued")
            raise self.retry(exc=exc, countdown=min(60, 5 * 2 ** self.request.retries)) from exc
        raise


@shared_task(name="diagnosis.refresh_insights", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def refresh_insights(run_id: str) -> None:
    """Refresh the insights from a continuous run (services/insights_refresh.py); claims the run's queued refresh,
    so a redelivered message does nothing. A failed refresh is marked failed and asked again by a later beat."""
    from diagnosis.services.insights_refresh import insights_refresh

    insights_refresh(run_id=run_id)


@shared_task(name="diagnosis.attribute_insight", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def attribute_insight(project_id: int, insight_id: int) -> None:
    """Attribute an insight's failing traces that have no attribution yet (the insight page's button); a
    redelivered message finds them attributed and does nothing again."""
    from clear.projects.models import Project
    from diagnosis.attribution.services import attribution_compute_for_insight

    project = Project.objects.filter(pk=project_id).first()
    if project is not None:
        attribution_compute_for_insight(project=project, insight_id=insight_id)
