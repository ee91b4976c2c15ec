"""Ticket writes: made and refreshed from insights, status kept in step with the insight's, the tracker connection.

Status mapping (both ways, so a change on either side round-trips to itself):
ticket open ↔ insight open, in_progress ↔ acknowledged, fixed ↔ fixed, wont_fix ↔ ignored.
A ticket set to fixed marks its insight fixed through the insights service; an insight that changes status (a
person's decision, or a fixed pattern that recurs in a later run) calls `ticket_sync_from_insight`.
Rejected insights and "other" buckets get no ticket; an insight merged into another closes its ticket as wont_fix.

One problem, one ticket:
* A node insight that is part of a system insight (an InsightLink to a system insight that gets a ticket) gets no
  ticket: the system ticket lists its nodes. A ticket such a node insight already has is closed as a duplicate
  (wont_fix, `merged_into` the system ticket), not re-pointed: its fingerprint (the identity a pushed issue is found
  by) stays the node pattern's, and the pushed issue closes as not planned with a pointer to the system ticket. If
  the node insight leaves the system insight later, its ticket reopens in step with the insight.
* An insight not associated with failure (`Insight.failure_association`, lift interval includes 1) gets no ticket
  unless settings.CLEAR_TICKET_NOT_ASSOCIATED; an existing ticket is left as it is and says so in its body. One
  that is inconclusive (`Insight.failure_inconclusive`: lift above 1, too few traces for the interval to clear 1)
  gets a candidate ticket, whose body says so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from clear.outbound import OutboundInvalidError, outbound_url_check
from clear.projects.models import Project
from diagnosis.models import Insight, InsightLink

from .body import body_render, content_collect, plain_title
from .errors import IssueTrackerInvalidError, TicketInvalidError, TicketNotFoundError
from .models import IssueTrackerConnection, Ticket

logger = logging.getLogger(__name__)

TICKET_OF_INSIGHT = {
    Insight.Status.OPEN: Ticket.Status.OPEN,
    Insight.Status.ACKNOWLEDGED: Ticket.Status.IN_PROGRESS,
    Insight.Status.FIXED: Ticket.Status.FIXED,
    Insight.Status.IGNORED: Ticket.Status.WONT_FIX,
}
INSIGHT_OF_TICKET = {ticket: insight for insight, ticket in TICKET_OF_INSIGHT.items()}
_COPIED = ("level", "node", "severity", "description", "root_cause", "recommendation", "frequency", "trace_count",
           "lift", "lift_low", "lift_high", "first_seen", "last_seen")


@dataclass
class SyncSummary:
    created: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    unchanged: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    closed_merged: list[int] = field(default_factory=list)
    closed_duplicate: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {name: len(getattr(self, name)) for name in self.__dataclass_fields__}


def _candidate(insight: Insight) -> bool:
    """Inconclusive (Insight.failure_inconclusive): a candidate ticket, unless it is an outlier alone, a symptom
    listed only when associated with failure (diagnosis/RUNS.md "Outliers")."""
    from diagnosis.selectors.problems import outlier_alone_unassociated

    return (insight.failure_inconclusive
            and not Insight.objects.filter(pk=insight.pk).filter(outlier_alone_unassociated()).exists())


def _ticketable(insight: Insight) -> bool:
    return (not insight.is_other and insight.review != Insight.Review.REJECTED and bool(insight.fingerprint)
            and insight.merged_into_id is None
            and (insight.failure_association != "not_associated" or _candidate(insight)
                 or getattr(settings, "CLEAR_TICKET_NOT_ASSOCIATED", False)))


def _system_of(insight: Insight) -> Insight | None:
    """The system insight (problem) a node insight is part of, when that one gets a ticket: the link holding most
    of the node insight's statements. Any link counts, as on the overview (frontend top_insights)."""
    if insight.level != Insight.Level.NODE:
        return None
    links = (InsightLink.objects.filter(node=insight, system__project_id=insight.project_id)
             .select_related("system").order_by("-share", "-shared", "system_id"))
    return next((link.system for link in links if _ticketable(link.system)), None)


def _system_first(insights: Iterable[Insight]) -> list[Insight]:
    """System insights first, so that a system ticket exists before its node insights' tickets point to it."""
    return sorted(insights, key=lambda i: (i.level != Insight.Level.SYSTEM, i.pk))


def _find(insight: Insight) -> Ticket | None:
    """The insight's ticket: linked to it, else the one of its fingerprint (a recurring pattern that came back as
    a new insight row, or a link lost when an insight was deleted)."""
    return (Ticket.objects.filter(project_id=insight.project_id, insight=insight).order_by("pk").first()
            or Ticket.objects.filter(project_id=insight.project_id, fingerprint=insight.fingerprint).first())


def _set_status(ticket: Ticket, status: str, now) -> bool:
    if ticket.status == status:
        return False
    if ticket.status in Ticket.CLOSED and status not in Ticket.CLOSED:
        ticket.reopen_count += 1
    ticket.status, ticket.status_changed_at = status, now
    return True


def _refresh(ticket: Ticket, insight: Insight) -> list[str]:
    """Copy the insight's headline and content onto the ticket; returns the fields that changed."""
    changed = []
    values = {name: getattr(insight, name) for name in _COPIED}
    values["title"] = plain_title(f"[{insight.node or 'system'}] {insight.title}")
    content = content_collect(insight=insight)
    values.update(evidence=content.evidence, traces=content.traces, trace_total=content.trace_total,
                  insight=insight, statement_count=insight.count, failure_association=insight.failure_association,
                  judged_count=content.judged_count, releases=content.releases, nodes=content.nodes,
                  suggested_fix=content.suggested_fix)
    for name, value in values.items():
        if getattr(ticket, name) != value:
            setattr(ticket, name, value)
            changed.append(name)
    return changed


def _save(ticket: Ticket, changed: list[str]) -> None:
    body = body_render(ticket=ticket)
    if body != ticket.body:
        ticket.body = body
        changed.append("body")
    if ticket.pk is None:
        ticket.save()
    elif changed:
        ticket.save(update_fields=sorted(set(changed)) + ["updated_at"])


def _sync_one(insight: Insight, summary: SyncSummary, now) -> Ticket | None:
    ticket = _find(insight)
    system = _system_of(insight)
    if ticket is None:
        if not _ticketable(insight) or system is not None:
            return None
        ticket = Ticket(project_id=insight.project_id, fingerprint=insight.fingerprint,
                        status=TICKET_OF_INSIGHT[insight.status], status_changed_at=now)
        _refresh(ticket, insight)
        try:
            with transaction.atomic():  # a concurrent sync of the same fingerprint: that one's ticket wins
                _save(ticket, [])
        except IntegrityError:
            ticket = Ticket.objects.get(project_id=insight.project_id, fingerprint=insight.fingerprint)
        else:
            summary.created.append(ticket.pk)
            return ticket
    if insight.merged_into_id:
        return _close_merged(ticket, insight, summary, now)
    if system is not None:
        return _close_duplicate(ticket, insight, system, summary, now)
    was_closed = ticket.is_closed
    changed = _refresh(ticket, insight)
    if ticket.merged_into_id and ticket.merged_into.level == Insight.Level.SYSTEM and ticket.level == "node":
        # It was a duplicate of a system ticket whose problem no longer holds this node insight: its own again.
        ticket.merged_into = None
        changed.append("merged_into")
    if _set_status(ticket, TICKET_OF_INSIGHT[insight.status], now):
        changed += ["status", "status_changed_at", "reopen_count"]
        if was_closed and not ticket.is_closed:
            summary.reopened.append(ticket.pk)
    _save(ticket, changed)
    (summary.updated if changed else summary.unchanged).append(ticket.pk)
    return ticket


def _close_merged(ticket: Ticket, insight: Insight, summary: SyncSummary, now) -> Ticket:
    target = Ticket.objects.filter(project_id=insight.project_id, insight_id=insight.merged_into_id).first()
    changed = []
    if target is not None and ticket.merged_into_id != target.pk and target.pk != ticket.pk:
        ticket.merged_into = target
        changed.append("merged_into")
    if _set_status(ticket, Ticket.Status.WONT_FIX, now):
        changed += ["status", "status_changed_at"]
    _save(ticket, changed)
    if changed:
        summary.closed_merged.append(ticket.pk)
    return ticket


def _close_duplicate(ticket: Ticket, insight: Insight, system: Insight, summary: SyncSummary, now) -> Ticket:
    """The node insight's problem is tracked by the system insight's ticket (made here if need be)."""
    target = _find(system) or _sync_one(system, summary, now)
    changed = _refresh(ticket, insight)
    if target is not None and ticket.merged_into_id != target.pk and target.pk != ticket.pk:
        ticket.merged_into = target
        changed.append("merged_into")
    if _set_status(ticket, Ticket.Status.WONT_FIX, now):
        changed += ["status", "status_changed_at"]
    _save(ticket, changed)
    if changed:
        summary.closed_duplicate.append(ticket.pk)
    else:
        summary.unchanged.append(ticket.pk)
    return ticket


def _push_soon(project_id) -> None:
    """Tickets changed: when the project has an enabled tracker, push after commit (the push skips what is
    unchanged, and a message lost here is made up by the next push)."""
    if not IssueTrackerConnection.objects.filter(project_id=project_id, enabled=True).exists():
        return

    def send() -> None:
        from .tasks import push_tickets as push_tickets_task

        try:
            push_tickets_task.delay(project_id)
        except Exception:  # noqa: BLE001 - the broker is down: the tickets are saved, the next push sends them
            logger.exception("tickets.push_enqueue_failed project=%s", project_id)

    transaction.on_commit(send)


def ticket_sync_for_insights(*, project: Project, insights: Iterable[Insight] | None = None) -> SyncSummary:
    """Create or update the tickets of `insights` (default: every listed insight of the project, merged-away ones
    included so their tickets close). Idempotent: one ticket per fingerprint, however often it runs."""
    if insights is None:
        insights = Insight.objects.filter(project=project, is_other=False).exclude(review=Insight.Review.REJECTED)
    summary, now = SyncSummary(), timezone.now()
    with transaction.atomic():
        # One writer of a project's tickets at a time (the insights build holds this lock while it writes).
        Project.objects.select_for_update().filter(pk=project.pk).first()
        for insight in _system_first(insights):
            if insight.project_id != project.pk:
                raise TicketInvalidError(f"Insight {insight.pk} is not in project {project.pk}")
            _sync_one(insight, summary, now)
        if summary.created or summary.updated or summary.closed_duplicate:
            _push_soon(project.pk)
    return summary


def ticket_sync_from_insight(*, insight: Insight) -> Ticket | None:
    """Bring the insight's ticket in step after the insight changed (status set by a person, reopened by a later
    run). Makes the ticket if the insight has none yet."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=insight.project_id).first()
        summary = SyncSummary()
        ticket = _sync_one(Insight.objects.get(pk=insight.pk), summary, timezone.now())
        if summary.created or summary.updated or summary.closed_duplicate:
            _push_soon(insight.project_id)
    return ticket


def ticket_sync_after_insights(*, run_id, insight_ids: list[int] | None = None) -> dict | None:
    """Called at the end of an insights build: the tickets of the run's insights (insight_ids: only these, for a
    refresh that touched a few). Never raises, so a ticket problem cannot fail the build; `manage.py sync_tickets`
    repairs what a failure left behind."""
    from diagnosis.models import DiagnosisRun

    try:
        run = DiagnosisRun.objects.select_related("project").get(pk=run_id)
        insights = Insight.objects.filter(project=run.project, occurrences__run=run, is_other=False).distinct()
        if insight_ids is not None:
            insights = insights.filter(pk__in=insight_ids)
        summary = ticket_sync_for_insights(project=run.project, insights=insights).as_dict()
    except Exception:  # noqa: BLE001 - see the docstring
        logger.exception("tickets.sync_failed run=%s", run_id)
        return None
    logger.info("tickets.synced run=%s %s", run_id, summary)
    return summary


def ticket_status_set(*, project: Project, ticket: Ticket, status: str, user=None, note: str = "") -> Ticket:
    """open / in_progress / fixed / wont_fix. The insight follows (fixed → fixed, wont_fix → ignored, …) through
    the insights service, which records the decision as an InsightEvent."""
    from diagnosis.services.insights_review import insight_status_set

    if status not in Ticket.Status.values:
        raise TicketInvalidError(f"status must be one of {', '.join(Ticket.Status.values)}; got {status!r}")
    if ticket is None or ticket.project_id != project.pk:
        raise TicketNotFoundError(f"No ticket {getattr(ticket, 'pk', None)} in this project")
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        ticket = Ticket.objects.get(pk=ticket.pk)
        insight = Insight.objects.filter(pk=ticket.insight_id).first() if ticket.insight_id else None
        if insight is not None and insight.merged_into_id is None and insight.status != INSIGHT_OF_TICKET[status]:
            insight_status_set(project=project, insight=insight, status=INSIGHT_OF_TICKET[status], user=user,
                               note=note or f"ticket {ticket.pk} set to {status}")
            ticket.refresh_from_db()
        changed = ["status", "status_changed_at", "reopen_count"] if _set_status(ticket, status,
                                                                                 timezone.now()) else []
        _save(ticket, changed)
        if changed:  # else the insight's sync above saved the new status and queued the push
            _push_soon(project.pk)
    return ticket


# --- the issue tracker connection ------------------------------------------------------------------------------------


def _repository_clean(repository: str) -> str:
    parts = (repository or "").strip().strip("/").split("/")
    if len(parts) != 2 or not all(p and p not in (".", "..") and "?" not in p and "#" not in p for p in parts):
        raise IssueTrackerInvalidError("repository must be 'owner/name'")
    return "/".join(parts)


def _base_url_clean(base_url: str) -> str:
    """The base URL if the outbound policy lets the tracker reach it (https, a public address, unless the operator
    widened it: CLEAR_TRACKER_ALLOW_HTTP, CLEAR_TRACKER_ALLOW_PRIVATE); each push checks it again and connects only
    to the addresses it checked (tracker.py)."""
    base_url = (base_url or "").strip()
    try:
        parts = urlsplit(base_url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed [ of an IPv6 address
        usable = False
    if not usable:
        problem = ("must be an absolute http:// or https:// URL, e.g. https://api.github.com or "
                   "https://github.example.com/api/v3")
        raise IssueTrackerInvalidError(f"base_url {problem}", extra={"fields": {"base_url": [problem]}})
    try:
        outbound_url_check(url=base_url, purpose="tracker", field="base_url")
    except OutboundInvalidError as exc:
        raise IssueTrackerInvalidError(exc.message, extra={"fields": exc.extra["fields"]}) from None
    return base_url.rstrip("/")


def issue_tracker_connect(*, project: Project, repository: str, token: str | None = None,
                          base_url: str = "https://api.github.com", enabled: bool = True) -> IssueTrackerConnection:
    """Create or change the project's tracker connection. `token=None` keeps the stored one."""
    repository, base_url = _repository_clean(repository), _base_url_clean(base_url)
    connection = IssueTrackerConnection.objects.filter(project=project).first()
    if token is not None:
        token = token.strip()
    if connection is None and not token:
        raise IssueTrackerInvalidError("A token is required to connect an issue tracker")
    connection = connection or IssueTrackerConnection(project=project)
    connection.repository, connection.base_url, connection.enabled = repository, base_url, enabled
    if token:
        connection.token = token
    connection.last_error = ""
    connection.save()
    return connection


def issue_tracker_disconnect(*, project: Project) -> None:
    IssueTrackerConnection.objects.filter(project=project).delete()
