"""Event payloads for other apps' happenings; each function is one line at its call site and never raises (a webhook
problem must not fail the work that emitted it)."""

import logging

from django.conf import settings
from django.db import transaction

from clear.webhooks.models import Webhook
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


def _insight_body(insight) -> dict:
    return {
        "id": insight.pk, "level": insight.level, "node": insight.node, "title": insight.title,
        "description": insight.description, "severity": insight.severity, "status": insight.status,
        "review": insight.review, "count": insight.count, "trace_count": insight.trace_count,
        "frequency": insight.frequency, "first_seen": insight.first_seen, "last_seen": insight.last_seen,
        "reopen_count": insight.reopen_count, "url": f"/api/v1/insights/{insight.pk}/",
    }


def _occurrence_body(occurrence) -> dict:
    return {"run": str(occurrence.run_id), "count": occurrence.count, "trace_count": occurrence.trace_count,
            "judged": occurrence.judged, "frequency": occurrence.frequency}


def insights_built(*, run, created: list[int], matched: list[int], reopened: list[int]) -> None:
    """`insight.created` for each new insight of a run's build, `insight.regressed` for each insight reopened by it
    or whose frequency rose by CLEAR_INSIGHT_REGRESSION_DELTA or more since the last earlier run it occurred in.
    Call inside the build's transaction: deliveries go out after it commits. Rejected and ignored insights (people
    said they are not problems) send nothing."""
    try:
        # A savepoint: an error here must not poison the build's transaction.
        with transaction.atomic():
            _insights_built(run=run, created=created, matched=matched, reopened=reopened)
    except Exception:  # noqa: BLE001
        logger.exception("webhooks.emit_failed event=insight.* run=%s", run.pk)


def _insights_built(*, run, created: list[int], matched: list[int], reopened: list[int]) -> None:
    from diagnosis.models import Insight, InsightOccurrence

    if not Webhook.objects.filter(project_id=run.project_id, active=True).exists():
        return
    threshold = settings.CLEAR_INSIGHT_REGRESSION_DELTA
    wanted = set(created) | set(matched) | set(reopened)
    insights = (Insight.objects.filter(pk__in=wanted, project_id=run.project_id, is_other=False)
                .exclude(review=Insight.Review.REJECTED).exclude(status=Insight.Status.IGNORED)
                .select_related("project").in_bulk())
    current = {o.insight_id: o for o in InsightOccurrence.objects.filter(run=run, insight_id__in=insights)}
    run_body = {"id": str(run.pk), "name": run.name, "release": run.release, "url": f"/api/v1/runs/{run.pk}/"}
    for insight_id in created:
        insight = insights.get(insight_id)
        if insight is not None:
            webhook_event_emit(project=insight.project, event="insight.created", payload={
                "insight": _insight_body(insight), "run": run_body,
                "occurrence": _occurrence_body(current[insight_id]) if insight_id in current else None})
    for insight_id in sorted((set(matched) | set(reopened)) - set(created)):
        insight, now = insights.get(insight_id), current.get(insight_id)
        if insight is None or now is None:
            continue
        previous = (InsightOccurrence.objects.filter(insight_id=insight_id, run__created_at__lt=run.created_at)
                    .exclude(run=run).order_by("-run__created_at").first())
        if insight_id in reopened:
            reason = "reopened"
        elif previous is not None and now.frequency - previous.frequency >= threshold:
            reason = "frequency"
        else:
            continue
        webhook_event_emit(project=insight.project, event="insight.regressed", payload={
            "reason": reason, "insight": _insight_body(insight), "run": run_body,
            "occurrence": _occurrence_body(now),
            "previous": _occurrence_body(previous) if previous is not None else None,
            "threshold": threshold})


def evolution_job_state_changed(*, job, from_state: str, to_state: str, event: str, reason: str = "") -> None:
    """`evolution_job.state_changed`: call inside the transition's transaction (sent after it commits)."""
    try:
        with transaction.atomic():  # a savepoint: an error here must not poison the transition's transaction
            if not Webhook.objects.filter(project_id=job.project_id, active=True).exists():
                return
            webhook_event_emit(project=job.project, event="evolution_job.state_changed", payload={
                "job": {"id": job.pk, "state": job.state, "state_version": job.state_version,
                        "terminal_reason": job.terminal_reason, "target": job.target_id,
                        "mode": (job.config_snapshot or {}).get("mode", "pr"),
                        "url": f"/api/v1/evolution/jobs/{job.pk}/"},
                "from": from_state, "to": to_state, "event": event, "reason": reason,
                "insight": {"id": job.insight_id, "url": f"/api/v1/insights/{job.insight_id}/"},
                "ticket": job.ticket_id})
    except Exception:  # noqa: BLE001
        logger.exception("webhooks.emit_failed event=evolution_job.state_changed job=%s", job.pk)
