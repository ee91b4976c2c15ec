"""Domain errors of insights (rendered by the one API handler as {"message", "code", "extra"})."""

from clear.errors import ClearError, NotFoundError


class InsightNotFoundError(NotFoundError):
    pass


class InsightStatementNotFoundError(NotFoundError):
    pass


class InsightInvalidError(ClearError):
    code = "insight_invalid"


class InsightMergeInvalidError(ClearError):
    code = "insight_merge_invalid"


class InsightSplitInvalidError(ClearError):
    code = "insight_split_invalid"
