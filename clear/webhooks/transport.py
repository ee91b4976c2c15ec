"""One webhook request, sent to an address checked beforehand (`clear.webhooks.targets`) and never to what a second
DNS lookup might say: the pinned connection of clear.outbound.pinned (the Host header, SNI and the certificate check
use the URL's host name; no proxy from the environment; a redirect is recorded like any other non-2xx answer).
"""

from dataclasses import dataclass

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from clear.outbound.pinned import outbound_request
from clear.webhooks.targets import WebhookTarget

RESPONSE_EXCERPT_BYTES = 1024


@dataclass(frozen=True)
class WebhookAttempt:
    code: int | None  # the answer's status, None when there was none
    body: str  # the start of the answer's body, from public addresses only
    error: str  # "<error class>: <detail>" when there was no answer


def _error(exc: BaseException) -> str:
    # Stable class names (those requests used before), whatever the library raised underneath.
    if isinstance(exc, SSLError):
        kind = "SSLError"
    elif isinstance(exc, NewConnectionError):  # before ConnectTimeoutError: urllib3 derives it from that
        kind = "ConnectionError"
    elif isinstance(exc, ConnectTimeoutError):
        kind = "ConnectTimeout"
    elif isinstance(exc, ReadTimeoutError):
        kind = "ReadTimeout"
    elif isinstance(exc, (ProtocolError, OSError)):
        kind = "ConnectionError"
    else:
        kind = type(exc).__name__
    return f"{kind}: {exc}"[:2000]


def _excerpt(response: urllib3.BaseHTTPResponse) -> str:
    # Only the excerpt is read: a receiver may answer with anything, of any size.
    try:
        data = response.read(RESPONSE_EXCERPT_BYTES, decode_content=True) or b""
    except (HTTPError, OSError):  # the status arrived; a body that breaks off is not worth more than it
        return ""
    return data[:RESPONSE_EXCERPT_BYTES].decode("utf-8", "replace")


def webhook_post(*, target: WebhookTarget, body: bytes, headers: dict[str, str], timeout: float) -> WebhookAttempt:
    """POST `body` to the target's resolved addresses in turn (the next one only when a connection cannot be
    made at all). The response body is read only from a public address: what a private service answers is not
    shown to API key holders, even where CLEAR_WEBHOOK_ALLOW_PRIVATE lets the request through."""
    if not target.addresses:
        raise ValueError("webhook_post needs a target from webhook_target_resolve")
    try:
        pinned = outbound_request(target=target, method="POST", body=body, headers=headers, timeout=timeout)
    except (HTTPError, OSError) as exc:
        return WebhookAttempt(code=None, body="", error=_error(exc))
    try:
        excerpt = _excerpt(pinned.response) if pinned.public else ""
        return WebhookAttempt(code=pinned.response.status, body=excerpt, error="")
    finally:
        pinned.close()
