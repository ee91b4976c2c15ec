"""Celery entrypoints of tickets: load by id, call a service. A push is safe to run twice (see push.py)."""

import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="tickets.push", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=5)
def push_tickets(self, project_id: int) -> None:
    from clear.projects.models import Project
    from diagnosis.tickets.errors import IssueTrackerError, IssueTrackerNotConfiguredError, TicketPushConflictError
    from diagnosis.tickets.push import tickets_push

    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return
    try:
        tickets_push(project=project)
    except IssueTrackerNotConfiguredError as exc:
        logger.info("tickets.push_skipped project=%s: %s", project_id, exc.message)
    except TicketPushConflictError as exc:
        # Another push is running and may have read the tickets before this change: push again after it.
        if not self.request.is_eager and self.request.retries < self.max_retries:
            raise self.retry(countdown=60) from exc
    except IssueTrackerError as exc:
        # Kept on the connection by the service. Only a network failure, 5xx or rate limit is worth another try;
        # eager tasks (tests, no broker) have no "later".
        if exc.transient and not self.request.is_eager and self.request.retries < self.max_retries:
            raise self.retry(countdown=min(600, 30 * 2 ** self.request.retries)) from exc
