from clear.errors import ClearError, NotFoundError


class WebhookInvalidError(ClearError):
    code = "webhook_invalid"


class WebhookNotFoundError(NotFoundError):
    pass
