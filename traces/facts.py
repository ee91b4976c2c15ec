"""What the traces app tells the other apps, through the outbox (clear.outbox). Who reacts is listed in
settings.CLEAR_OUTBOX_SUBSCRIPTIONS by task name; nothing here knows them."""

from clear.outbox.services import outbox_publish

# Follow-up work on traces that received spans or scores: keys are trace primary keys, no data.
TRACE_FINALIZE = "trace.finalize"
# Traces were deleted (API, UI, retention): {"project": id, "traces": [pk, ...], <hook name>: what a deletion hook
# added (traces/services/lifecycle.py)}. Published in the deleting transaction.
TRACE_DELETED = "trace.deleted"


def traces_deleted_publish(*, project_id, trace_pks: list[int], hooks_data: dict[str, dict]) -> None:
    outbox_publish(topic=TRACE_DELETED, data={"project": str(project_id), "traces": trace_pks, **hooks_data})
