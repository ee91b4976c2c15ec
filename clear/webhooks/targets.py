"""Where webhooks may send: public addresses only (http or https), checked when a URL is saved and again at every
delivery, by the policy every outbound connection follows (clear.outbound: its `webhook` purpose).

`CLEAR_WEBHOOK_ALLOW_PRIVATE` lets an on-premise operator allow loopback and private addresses; link-local,
multicast, unspecified and reserved ones stay refused. The check at saving is early feedback; the one that matters
is at delivery: `webhook_target_resolve` resolves the host once and the delivery connects to the very addresses it
checked (`clear.webhooks.transport`), so a DNS answer that changes between check and connection cannot reach an
internal address. Here the policy's errors become the webhook API's own (codes and messages clients know).
"""

from clear.outbound.policy import (
    PRIVATE_KINDS,  # noqa: F401 - part of this module's interface
    IPAddress,  # noqa: F401
    OutboundInvalidError,
    OutboundRefusedError,
    OutboundTarget,
    OutboundUnresolvedError,
    outbound_address_kind,
    outbound_target_resolve,
    outbound_url_check,
)
from clear.webhooks.errors import WebhookInvalidError, WebhookTargetRefusedError, WebhookTargetUnresolvedError

WebhookTarget = OutboundTarget
webhook_address_kind = outbound_address_kind
_INVALID = "Enter an absolute http:// or https:// URL."


def _webhook_error(exc: OutboundInvalidError | OutboundUnresolvedError, *, at_delivery: bool) -> Exception:
    if isinstance(exc, OutboundUnresolvedError):
        return WebhookTargetUnresolvedError(exc.message)
    if isinstance(exc, OutboundRefusedError):
        if at_delivery:
            return WebhookTargetRefusedError(exc.message, extra={"addresses": exc.extra.get("addresses", [])})
        return WebhookTargetRefusedError(exc.message, extra={"fields": exc.extra["fields"]})
    return WebhookInvalidError("url: the webhook URL must be an absolute http:// or https:// URL with a host.",
                               extra={"fields": {"url": [_INVALID]}})


def webhook_url_check(*, url: str) -> str:
    """The URL if webhooks may send to it; otherwise a 400 that names the field `url`. A host that does not
    resolve now is accepted: every delivery resolves and checks it again."""
    try:
        outbound_url_check(url=url, purpose="webhook", field="url")
    except OutboundInvalidError as exc:
        raise _webhook_error(exc, at_delivery=False) from None
    return url


def webhook_target_resolve(*, url: str) -> WebhookTarget:
    """The target of a delivery, resolved once: its addresses are the only ones the delivery may connect to.
    Raises WebhookTargetRefusedError (or WebhookInvalidError for a URL that no longer parses) when it must not be
    sent, WebhookTargetUnresolvedError when the name does not resolve now."""
    try:
        return outbound_target_resolve(url=url, purpose="webhook", field="url")
    except (OutboundInvalidError, OutboundUnresolvedError) as exc:
        raise _webhook_error(exc, at_delivery=True) from None
