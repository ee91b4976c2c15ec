"""After each build and refresh: the insights that came back in a newer release (insights/regressed.py) are flagged,
their tickets reopened and `insight.regressed` sent once per insight and release (the flag's conditional update is
the claim)."""

from __future__ import annotations

import logging

from clear.webhooks.events import webhook_events_emit_safely
from diagnosis.insights.regressed import insights_regressed_mark
from diagnosis.models import DiagnosisRun, Insight, InsightEvent
from diagnosis.services.insights_webhooks import insight_webhook_body

logger = logging.getLogger(__name__)


def insights_regressed_apply(*, run: DiagnosisRun) -> list[int]:
    """Returns the ids flagged now."""
    from diagnosis.tickets.services import ticket_sync_from_insight

    flagged = insights_regressed_mark(project_id=run.project_id)
    if not flagged:
        return []
    insights = list(Insight.objects.filter(pk__in=flagged).order_by("pk"))
    for insight in insights:
        InsightEvent.objects.create(insight=insight, kind="regressed", run=run,
                                    data={"release": insight.regressed_in_release})
        ticket_sync_from_insight(insight=insight)
    # A node insight nested in a system insight is part of that problem: the problem's webhook speaks for it.
    nested = set(Insight.objects.filter(pk__in=flagged, level=Insight.Level.NODE,
                                        system_links__system__merged_into=None, system_links__system__is_other=False)
                 .values_list("pk", flat=True))
    sent = [i for i in insights if i.pk not in nested]
    run_body = {"id": str(run.pk), "name": run.name, "release": run.release, "url": f"/api/v1/runs/{run.pk}/"}
    webhook_events_emit_safely(
        project_id=run.project_id, context=f"event=insight.regressed run={run.pk}",
        events=lambda: [("insight.regressed", {
            "reason": "release", "release": insight.regressed_in_release, "insight": insight_webhook_body(insight),
            "run": run_body, "trend": insight.trend}) for insight in sent])
    logger.info("insights.regressed run=%s insights=%s", run.pk, flagged)
    return flagged
