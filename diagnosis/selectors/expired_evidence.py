"""An insight's citations of traces that retention removed: frozen when their traces expired
(diagnosis/services/evidence_expiry.py), so the insight page and API list them and say the trace expired, with the
quote or, when quotes go with their traces, without it."""

from __future__ import annotations

from django.utils.dateparse import parse_datetime

from clear.projects.models import Project
from diagnosis.models import Insight, InsightEvent

EXPIRED_EVIDENCE_MAX = 100  # the newest, like the page's first citations


def insight_evidence_expired_list(*, project: Project, insight: Insight, node: str = "",
                                  limit: int = EXPIRED_EVIDENCE_MAX) -> list[dict]:
    """The frozen citations, newest expiry first: {run_id, trace_id, span_id, node, statement, quote, quote_removed,
    outcome, task_id, release, expired_at (datetime), retention_days}; `node`: statements made at that node only."""
    from diagnosis.services.evidence_expiry import EVIDENCE_EXPIRED

    events = (InsightEvent.objects.filter(insight__project=project, insight=insight, kind=EVIDENCE_EXPIRED)
              .order_by("-created_at", "-pk").only("data"))
    found: list[dict] = []
    for event in events.iterator():
        for entry in (event.data or {}).get("evidence") or []:
            if node and entry.get("node") != node:
                continue
            found.append({**entry, "quote": entry.get("quote") or "",
                          "quote_removed": bool(entry.get("quote_removed")),
                          "expired_at": parse_datetime(str(entry.get("expired_at") or ""))})
            if len(found) >= limit:
                return found
    return found
