from clear.errors import ClearError, NotFoundError


class WebhookInvalidError(ClearError):
    code = "webhook_invalid"


class WebhookNotFoundError(NotFoundError):
    pass


class WebhookTargetRefusedError(WebhookInvalidError):
    """The URL's host is, or resolves to, an address webhooks may not reach (loopback, private, link-local, …)."""

    code = "webhook_target_refused"


class WebhookTargetUnresolvedError(ClearError):
    """The URL's host does not resolve right now: a delivery tries again later."""

    code = "webhook_target_unresolved"
