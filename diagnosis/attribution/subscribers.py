"""Attribution's reactions to other apps' facts (clear.outbox; settings.CLEAR_OUTBOX_SUBSCRIPTIONS names these tasks).
Each takes the facts of one dispatch round and is safe to run twice (a trace attributed since its feedback is kept)."""

from celery import shared_task


@shared_task(name="attribution.after_build", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def attribution_after_build(facts: list[dict]) -> None:
    """insights.built: the run's failed traces get their learned attribution (who and which step, with confidence)."""
    from diagnosis.attribution.services import attribution_compute_for_run

    for fact in facts:
        attribution_compute_for_run(run_id=fact["data"]["run"])
