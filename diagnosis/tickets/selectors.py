"""Reads of tickets and the tracker connection, always scoped to a project."""

from __future__ import annotations

from django.db.models import QuerySet

from clear.db import row_by_id
from clear.projects.models import Project

from .errors import IssueTrackerNotConfiguredError, TicketInvalidError, TicketNotFoundError
from .models import IssueTrackerConnection, Ticket

UNRESOLVED = (Ticket.Status.OPEN, Ticket.Status.IN_PROGRESS)
STATUS_FILTERS = ("open", "all", *Ticket.Status.values)


def ticket_statuses(status: str) -> list[str] | None:
    """A status filter as statuses: "open" is every unresolved ticket (open and in_progress), "all" is None, and
    "in_progress" / "fixed" / "wont_fix" are themselves."""
    if status not in STATUS_FILTERS:
        raise TicketInvalidError(f"status must be one of {', '.join(STATUS_FILTERS)}; got {status!r}")
    if status == "all":
        return None
    return list(UNRESOLVED) if status == "open" else [status]


def ticket_list(*, project: Project, status: str = "all", level: str | None = None, node: str | None = None,
                severity: str | None = None, insight_id: int | None = None,
                include_merged: bool = True) -> QuerySet[Ticket]:
    """The project's tickets, newest first. include_merged=False: one row per problem, leaving out the tickets
    that point to another (`merged_into`: a node ticket tracked by its system ticket, which lists it in `nodes`)."""
    tickets = Ticket.objects.filter(project=project)
    if not include_merged:
        tickets = tickets.filter(merged_into__isnull=True)
    statuses = ticket_statuses(status)
    if statuses is not None:
        tickets = tickets.filter(status__in=statuses)
    if level:
        tickets = tickets.filter(level=level)
    if node is not None:
        tickets = tickets.filter(node=node)
    if severity:
        tickets = tickets.filter(severity=severity)
    if insight_id is not None:
        tickets = tickets.filter(insight_id=insight_id)
    # The insight says whether the ticket is a candidate (Ticket.candidate); its centroid is never read here.
    return tickets.select_related("insight").defer("insight__centroid").order_by("-pk")


def ticket_get(*, project: Project, ticket_id) -> Ticket:
    ticket = row_by_id(Ticket.objects.filter(project=project), ticket_id)
    if ticket is None:
        raise TicketNotFoundError(f"No ticket {ticket_id} in this project")
    return ticket


def ticket_for_insight(*, project: Project, insight) -> Ticket | None:
    return Ticket.objects.filter(project=project, insight=insight).order_by("pk").first()


def ticket_by_insight_map(*, project: Project, insight_ids: list[int]) -> dict[int, Ticket]:
    """{insight pk: its ticket} in one query, the ticket `ticket_for_insight` gives (the oldest). The body and the
    evidence (kilobytes a ticket) are left for a caller that reads them: a page of insights needs the ticket's
    number and state."""
    tickets: dict[int, Ticket] = {}
    for ticket in (Ticket.objects.filter(project=project, insight_id__in=insight_ids)
                   .defer("body", "evidence", "suggested_fix").order_by("-pk")):
        tickets[ticket.insight_id] = ticket
    return tickets


def issue_tracker_get(*, project: Project) -> IssueTrackerConnection:
    connection = IssueTrackerConnection.objects.filter(project=project).first()
    if connection is None:
        raise IssueTrackerNotConfiguredError(
            "This project has no issue tracker: connect one (PUT /api/v1/tickets/tracker/ or "
            "`manage.py connect_issue_tracker`) with a base URL, a repository owner/name and a token")
    return connection
