"""Domain errors of tickets and the issue tracker (rendered as {"message", "code", "extra"} under /api/v1/)."""

from clear.errors import ClearError, ConflictError, NotFoundError


class TicketNotFoundError(NotFoundError):
    pass


class TicketInvalidError(ClearError):
    code = "ticket_invalid"


class IssueTrackerNotConfiguredError(ClearError):
    code = "issue_tracker_not_configured"


class IssueTrackerInvalidError(ClearError):
    code = "issue_tracker_invalid"


class TicketPushConflictError(ConflictError):
    code = "ticket_push_running"


class IssueTrackerError(ClearError):
    """The tracker answered with an error or could not be reached. `reason`: one of tracker.FAILURE_REASONS (the
    message says it with the status, never the tracker's own words); `transient`: worth retrying later (network,
    5xx, rate limit); `fatal`: nothing else will work with this connection (bad token, no such repository)."""

    status_code = 502
    code = "issue_tracker_error"

    def __init__(self, message: str, *, reason: str = "unexpected reply", http_status: int | None = None,
                 transient: bool = False, fatal: bool = False):
        super().__init__(message, extra={"http_status": http_status, "reason": reason})
        self.http_status, self.reason, self.transient, self.fatal = http_status, reason, transient, fatal
