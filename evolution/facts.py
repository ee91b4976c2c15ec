"""What the evolution app tells the other apps, through the outbox (clear.outbox). Who reacts is listed in
settings.CLEAR_OUTBOX_SUBSCRIPTIONS by task name; nothing here knows them."""

from clear.outbox.services import outbox_publish
from evolution.models import EvolutionJob

# A job moved from one state to another: {"project": id, "body": the `evolution_job.state_changed` webhook data}.
EVOLUTION_JOB_STATE_CHANGED = "evolution_job.state_changed"


def evolution_job_state_changed_publish(*, job: EvolutionJob, from_state: str, to_state: str, event: str,
                                        reason: str = "") -> None:
    """Call inside the transition's transaction: a transition rolled back tells nobody, each one committed tells
    once (the key is the job's state version)."""
    outbox_publish(topic=EVOLUTION_JOB_STATE_CHANGED, key=f"{job.pk}:{job.state_version}", data={
        "project": str(job.project_id), "body": {
            "job": {"id": job.pk, "state": job.state, "state_version": job.state_version,
                    "terminal_reason": job.terminal_reason, "target": job.target_id,
                    "mode": (job.config_snapshot or {}).get("mode", "pr"),
                    "url": f"/api/v1/evolution/jobs/{job.pk}/"},
            "from": from_state, "to": to_state, "event": event, "reason": reason,
            "insight": {"id": job.insight_id, "url": f"/api/v1/insights/{job.insight_id}/"},
            "ticket": job.ticket_id}})
