"""Pushing a project's tickets to its issue tracker: one issue per ticket, updated when the ticket changes, closed
when it is fixed (completed) or won't be fixed (not planned).

No duplicates on re-push: the ticket keeps its issue's number, and a ticket without one (never pushed, or its
record lost) is first looked up by the fingerprint comment in the repository's issue bodies, so a push that died
between creating an issue and saving its number does not create a second one. One push per connection at a time
(a lease on the connection row, claimed with a conditional update); a push that crashed frees it after the lease.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from clear.projects.models import Project

from .errors import IssueTrackerError, IssueTrackerNotConfiguredError, TicketPushConflictError
from .models import IssueTrackerConnection, Ticket
from .selectors import issue_tracker_get
from .tracker import IssueTracker, RemoteIssue

logger = logging.getLogger(__name__)

PUSH_LEASE_SECONDS = 900
ERRORS_KEPT = 20


@dataclass
class PushSummary:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    recovered: int = 0  # found on the tracker by fingerprint instead of being created again
    skipped: int = 0  # closed before ever being pushed: nothing to open an issue for
    failed: int = 0
    errors: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"created": self.created, "updated": self.updated, "unchanged": self.unchanged,
                "recovered": self.recovered, "skipped": self.skipped, "failed": self.failed, "errors": self.errors}


@dataclass(frozen=True)
class Desired:
    title: str
    body: str
    state: str
    state_reason: str | None

    @property
    def digest(self) -> str:
        raw = "\0".join([self.title, self.body, self.state, self.state_reason or ""])
        return hashlib.sha256(raw.encode()).hexdigest()

    def matches(self, remote: RemoteIssue) -> bool:
        def norm(text: str) -> str:
            return text.replace("\r\n", "\n").strip()

        return remote.title == self.title and norm(remote.body) == norm(self.body) and remote.state == self.state


def _desired(ticket: Ticket) -> Desired:
    reason = {Ticket.Status.FIXED: "completed", Ticket.Status.WONT_FIX: "not_planned"}.get(ticket.status)
    return Desired(title=ticket.title, body=ticket.body, state="closed" if reason else "open", state_reason=reason)


def _claim(connection: IssueTrackerConnection) -> bool:
    now = timezone.now()
    free = Q(push_started_at=None) | Q(push_started_at__lt=now - timedelta(seconds=PUSH_LEASE_SECONDS))
    return bool(IssueTrackerConnection.objects.filter(free, pk=connection.pk).update(push_started_at=now))


def _record(ticket: Ticket, remote: RemoteIssue, desired: Desired | None) -> None:
    """Save the issue on the ticket at once: a crash later in the push must not forget it."""
    values = {"external_number": remote.number, "external_url": remote.url[:500], "push_error": ""}
    if desired is not None:
        values.update(pushed_hash=desired.digest, pushed_at=timezone.now())
    Ticket.objects.filter(pk=ticket.pk).update(**values)
    for name, value in values.items():
        setattr(ticket, name, value)


def _push_one(tracker: IssueTracker, ticket: Ticket, index: dict | None, summary: PushSummary) -> dict | None:
    """Push one ticket; returns the fingerprint index (loaded on first need)."""
    desired = _desired(ticket)
    if ticket.external_number and ticket.pushed_hash == desired.digest:
        summary.unchanged += 1
        return index
    if not ticket.external_number:
        if index is None:
            index = tracker.issues_by_fingerprint()
        remote = index.get(ticket.fingerprint)
        if remote is not None:
            summary.recovered += 1
            if desired.matches(remote):
                _record(ticket, remote, desired)
                return index
            _record(ticket, remote, None)
        elif ticket.is_closed:
            summary.skipped += 1
            return index
        else:
            remote = tracker.create(title=desired.title, body=desired.body)
            _record(ticket, remote, desired)
            summary.created += 1
            index[ticket.fingerprint] = remote
            return index
    try:
        remote = tracker.update(number=ticket.external_number, title=desired.title, body=desired.body,
                                state=desired.state, state_reason=desired.state_reason)
    except IssueTrackerError as exc:
        if exc.http_status != 410:
            raise
        # The issue was deleted on the tracker: forget it; the next push opens a new one if the ticket is open.
        Ticket.objects.filter(pk=ticket.pk).update(external_number=None, external_url="", pushed_hash="")
        raise
    _record(ticket, remote, desired)
    summary.updated += 1
    return index


def tickets_push(*, project: Project) -> PushSummary:
    """Create, update or close the project's issues so they match its tickets. Raises IssueTrackerError when the
    tracker refuses the connection (bad token, no repository, unreachable): the message is kept on the connection;
    a single ticket's refusal (422) is kept on that ticket and the push goes on."""
    connection = issue_tracker_get(project=project)
    if not connection.enabled:
        raise IssueTrackerNotConfiguredError(f"The issue tracker connection to {connection.repository} is disabled")
    if not _claim(connection):
        raise TicketPushConflictError("A push of this project's tickets is running; try again when it ends")
    summary = PushSummary()
    try:
        tracker = IssueTracker(base_url=connection.base_url, repository=connection.repository,
                               token=connection.token)
        index = None
        for ticket in Ticket.objects.filter(project=project).order_by("pk"):
            try:
                index = _push_one(tracker, ticket, index, summary)
            except IssueTrackerError as exc:
                if exc.fatal or exc.transient:
                    raise
                summary.failed += 1
                Ticket.objects.filter(pk=ticket.pk).update(push_error=exc.message)
                if len(summary.errors) < ERRORS_KEPT:
                    summary.errors.append({"ticket": ticket.pk, "message": exc.message})
    except IssueTrackerError as exc:
        IssueTrackerConnection.objects.filter(pk=connection.pk).update(
            push_started_at=None, last_error=exc.message, last_error_at=timezone.now(),
            last_push_summary={**summary.as_dict(), "error": exc.message})
        logger.warning("tickets.push_failed project=%s status=%s", project.pk, exc.http_status)
        raise
    except BaseException:
        IssueTrackerConnection.objects.filter(pk=connection.pk).update(push_started_at=None)
        raise
    last_error = summary.errors[0]["message"] if summary.errors else ""
    IssueTrackerConnection.objects.filter(pk=connection.pk).update(
        push_started_at=None, last_push_at=timezone.now(), last_push_summary=summary.as_dict(),
        last_error=last_error, last_error_at=timezone.now() if last_error else None)
    logger.info("tickets.pushed project=%s %s", project.pk, summary.as_dict())
    return summary


def tickets_push_request(*, project: Project) -> IssueTrackerConnection:
    """Queue a push (the `tickets.push` task); the connection must exist and be enabled."""
    from .tasks import push_tickets as push_tickets_task

    connection = issue_tracker_get(project=project)
    if not connection.enabled:
        raise IssueTrackerNotConfiguredError(f"The issue tracker connection to {connection.repository} is disabled")
    push_tickets_task.delay(project.pk)
    return connection
