"""Evidence quotes when retention expires their traces (called by the diagnosis deletion hook, trace_deletion.py).

A quote is text copied out of a span. The database cascade removes the copies that hang off the trace (feedback and
its issues, statements and their evidence JSON, InsightEvidence rows); these stay, and are handled here:

- the insight's citations: each InsightEvidence row of an expired trace is kept, frozen, in an "evidence_expired"
  InsightEvent (its statement, span, outcome, and the quote unless quotes go), so that the insight page and API still
  list the citation and say its trace expired (selectors/expired_evidence.py) instead of linking to a 410;
- tickets: their `evidence` JSON entries of expired traces are marked expired (when, under which retention), the quote
  emptied unless quotes are kept, and the body (Markdown, also pushed to the tracker and exported) re-rendered; a
  push is queued so that the tracker's copy of the body loses the quotes too;
- the judge cache: LLM results keyed by content hash hold the judge's quotes; the expired traces' entries go when
  quotes go (unless live feedback uses them too), a later identical trace is judged again.

CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES (default off) keeps the quotes: off, they go with the traces, for privacy. The
figures never change: only text copied from the spans is removed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clear.projects.models import Project
from diagnosis.models import Feedback, InsightEvent, InsightEvidence, JudgeCacheEntry
from traces.models import ExpiredTrace, Trace

logger = logging.getLogger(__name__)

EVIDENCE_EXPIRED = "evidence_expired"  # the InsightEvent kind holding an insight's frozen citations


def retention_keeps_quotes() -> bool:
    return bool(getattr(settings, "CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES", False))


def evidence_expiry_prepare(*, project: Project, trace_pks: list[int]) -> Callable[[], None] | None:
    """Read, before the cascade, the citations and judge-cache keys of traces retention is removing; returns what
    freezes the citations and strips the quotes once the traces are gone (None: nothing cites them)."""
    trace_ids = dict(Trace.objects.filter(project=project, pk__in=trace_pks).values_list("pk", "trace_id"))
    if not trace_ids:
        return None
    citations: dict[int, list[dict]] = defaultdict(list)
    rows = (InsightEvidence.objects.filter(insight__project=project, trace_id__in=list(trace_ids))
            .select_related("trace", "statement").order_by("insight_id", "-run__created_at", "pk"))
    for e in rows:
        citations[e.insight_id].append({
            "run_id": str(e.run_id), "trace_id": e.trace.trace_id, "span_id": e.span_id,
            "node": e.statement.node if e.statement is not None else "", "statement": e.statement_text,
            "quote": e.quote, "outcome": e.trace.outcome or "", "task_id": e.trace.task_id,
            "release": e.trace.release,
        })
    cache_keys = set(Feedback.objects.filter(trace_id__in=list(trace_ids)).exclude(cache_key="")
                     .values_list("cache_key", flat=True))

    def after() -> None:
        keep = retention_keeps_quotes()
        expiry = _expiry_of(project=project, trace_ids=set(trace_ids.values()))
        _insights_freeze(citations=citations, expiry=expiry, keep=keep)
        _tickets_mark(project=project, expiry=expiry, keep=keep)
        if not keep and cache_keys:
            # Feedback of other traces may share an entry (identical content): those traces still show that text.
            shared = set(Feedback.objects.filter(cache_key__in=cache_keys).values_list("cache_key", flat=True))
            JudgeCacheEntry.objects.filter(key__in=cache_keys - shared).delete()
        logger.info("diagnosis.evidence_expired project=%s traces=%d insights=%d quotes_kept=%s", project.pk,
                    len(trace_ids), len(citations), keep)

    return after


def _expiry_of(*, project: Project, trace_ids: set[str]) -> dict[str, dict]:
    """{trace_id: {"expired_at", "retention_days"}} from the ExpiredTrace rows the deletion wrote."""
    found = {t.trace_id: {"expired_at": t.expired_at.isoformat(), "retention_days": t.retention_days}
             for t in ExpiredTrace.objects.filter(project=project, trace_id__in=trace_ids)}
    now = timezone.now().isoformat()
    return {trace_id: found.get(trace_id) or {"expired_at": now, "retention_days": None} for trace_id in trace_ids}


def _stripped(entry: dict, keep: bool) -> dict:
    if keep or not entry.get("quote"):
        return entry
    return {**entry, "quote": "", "quote_removed": True}


EXPIRED_DECISION = "What that step decided is not shown: its trace expired."


def _fix_stripped(fix: dict, keep: bool) -> dict:
    """The suggested fix without what it copied out of the expired trace's spans (tickets/fix.py `decision`: the
    call's arguments, the tool's reply, what the step had in front of it)."""
    decision = fix.get("decision") or ""
    if keep or not decision:
        return fix
    return {**fix, "text": (fix.get("text") or "").replace(decision, EXPIRED_DECISION), "decision": "",
            "quote_removed": True}


def _insights_freeze(*, citations: dict[int, list[dict]], expiry: dict[str, dict], keep: bool) -> None:
    InsightEvent.objects.bulk_create([
        InsightEvent(insight_id=insight_id, kind=EVIDENCE_EXPIRED, data={
            "quotes_kept": keep,
            "evidence": [{**_stripped(entry, keep), **expiry[entry["trace_id"]]} for entry in entries]})
        for insight_id, entries in citations.items()])


def _tickets_mark(*, project: Project, expiry: dict[str, dict], keep: bool) -> None:
    """Mark (and, quotes going, empty) the ticket evidence of the expired traces and re-render the bodies. Every
    ticket of the project is looked at: its evidence was copied from its insight at the last sync, and the insight
    link may have moved or gone since."""
    from diagnosis.tickets.body import body_render
    from diagnosis.tickets.models import IssueTrackerConnection, Ticket

    changed = 0
    for ticket in Ticket.objects.filter(project=project).select_related("project", "merged_into").iterator():
        evidence = ticket.evidence or []
        fix = ticket.suggested_fix or {}
        hit = [i for i, e in enumerate(evidence) if isinstance(e, dict) and e.get("trace_id") in expiry]
        fix_hit = fix.get("trace_id") in expiry
        if not hit and not fix_hit:
            continue
        for i in hit:
            evidence[i] = {**_stripped(evidence[i], keep), **expiry[evidence[i]["trace_id"]]}
        if fix_hit:
            ticket.suggested_fix = {**_fix_stripped(fix, keep), **expiry[fix["trace_id"]]}
        ticket.evidence = evidence
        ticket.body = body_render(ticket=ticket)
        ticket.save(update_fields=["evidence", "suggested_fix", "body", "updated_at"])
        changed += 1
    if changed and IssueTrackerConnection.objects.filter(project=project, enabled=True).exists():
        transaction.on_commit(lambda: _push(project))


def _push(project: Project) -> None:
    """The tracker's issues carry the old bodies: push the new ones (a lost message is made up by the next push)."""
    from diagnosis.tickets.push import tickets_push_request

    try:
        tickets_push_request(project=project)
    except Exception:  # noqa: BLE001 - the broker is down or the tracker was disconnected meanwhile
        logger.exception("diagnosis.evidence_expired_push_failed project=%s", project.pk)
