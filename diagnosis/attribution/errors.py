"""Domain errors of attribution (rendered as {"message", "code", "extra"} under /api/v1/)."""

from clear.errors import ClearError, NotFoundError


class AttributionInvalidError(ClearError):
    code = "attribution_invalid"


class AttributionNotFoundError(NotFoundError):
    pass
