"""One policy for every connection Clear opens on a project's behalf (webhooks, the issue tracker, git sources,
model endpoints): which schemes and addresses each may reach (policy.py) and connections pinned to the addresses
that were checked (pinned.py)."""

from clear.outbound.policy import (
    PURPOSES,
    IPAddress,
    OutboundInvalidError,
    OutboundRefusedError,
    OutboundTarget,
    OutboundUnresolvedError,
    outbound_address_kind,
    outbound_target_resolve,
    outbound_url_check,
    outbound_url_parse,
)

__all__ = [
    "PURPOSES", "IPAddress", "OutboundInvalidError", "OutboundRefusedError", "OutboundTarget",
    "OutboundUnresolvedError", "outbound_address_kind", "outbound_target_resolve", "outbound_url_check",
    "outbound_url_parse",
]
