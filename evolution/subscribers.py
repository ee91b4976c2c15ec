"""The evolution app's reactions to other apps' facts (clear.outbox; settings.CLEAR_OUTBOX_SUBSCRIPTIONS names these
tasks). Each takes the facts of one dispatch round and is safe to run twice."""

from celery import shared_task


@shared_task(name="evolution.fixes_check_after_build", acks_late=True, reject_on_worker_lost=True,
             ignore_result=True)
def fixes_check_after_build(facts: list[dict]) -> None:
    """insights.built: the promoted fixes watched in the run's project are confirmed or reopened by its insights."""
    from evolution.services.watch import insight_fixes_check

    for fact in facts:
        insight_fixes_check(run_id=fact["data"]["run"])
