"""What the diagnosis app tells the other apps, through the outbox (clear.outbox). Who reacts is listed in
settings.CLEAR_OUTBOX_SUBSCRIPTIONS by task name; nothing here knows them. Publish inside the transaction that makes
the fact true, so the fact commits with it or not at all."""

from clear.outbox.services import outbox_publish
from diagnosis.models import DiagnosisRun

# A run's insights were built (and its tickets followed them): {"project": id, "run": id}.
INSIGHTS_BUILT = "insights.built"
# A run reached a final status: {"project": id, "body": the `diagnosis_run.finished` webhook data}.
DIAGNOSIS_RUN_FINISHED = "diagnosis_run.finished"


def insights_built_publish(*, run: DiagnosisRun) -> None:
    outbox_publish(topic=INSIGHTS_BUILT, data={"project": str(run.project_id), "run": str(run.pk)})


def diagnosis_run_finished_publish(*, run_id) -> None:
    """Call once, in the transaction that moved the run to a final status."""
    run = DiagnosisRun.objects.filter(pk=run_id).first()
    if run is None:
        return
    outbox_publish(topic=DIAGNOSIS_RUN_FINISHED, data={"project": str(run.project_id), "body": {"run": {
        "id": str(run.pk), "name": run.name, "status": run.status, "continuous": run.continuous,
        "release": run.release, "total_count": run.total_count, "done_count": run.done_count,
        "skipped_count": run.skipped_count, "error_count": run.error_count, "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens, "cost": run.cost, "failure_message": run.failure_message,
        "created_at": run.created_at, "started_at": run.started_at, "finished_at": run.finished_at,
        "url": f"/api/v1/runs/{run.pk}/",
    }}})
