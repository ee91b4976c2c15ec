"""Event payloads for other apps' happenings; each function is one line at its call site and never raises (a webhook
problem must not fail the work that emitted it)."""

import logging

from clear.webhooks.services import webhook_event_emit

logger = logging.getLogger(__name__)


def diagnosis_run_finished(*, run_id) -> None:
    """`diagnosis_run.finished`: call once, where the run moved to a final status."""
    try:
        from diagnosis.models import DiagnosisRun

        run = DiagnosisRun.objects.select_related("project").filter(pk=run_id).first()
        if run is None:
            return
        webhook_event_emit(project=run.project, event="diagnosis_run.finished", payload={"run": {
            "id": str(run.pk), "name": run.name, "status": run.status, "continuous": run.continuous,
            "release": run.release, "total_count": run.total_count, "done_count": run.done_count,
            "skipped_count": run.skipped_count, "error_count": run.error_count, "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens, "cost": run.cost, "failure_message": run.failure_message,
            "created_at": run.created_at, "started_at": run.started_at, "finished_at": run.finished_at,
            "url": f"/api/v1/runs/{run.pk}/",
        }})
    except Exception:  # noqa: BLE001
        logger.exception("webhooks.emit_failed event=diagnosis_run.finished run=%s", run_id)
