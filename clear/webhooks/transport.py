"""One webhook request, sent to an address checked beforehand (`clear.webhooks.targets`) and never to what a second
DNS lookup might say.

urllib3 is handed the address itself as the host to connect to, while the Host header and, for https, SNI and the
certificate check use the URL's host name. Proxies from the environment are not used (a proxy would resolve the
name again, out of our sight) and redirects are not followed (a 3xx is recorded like any other non-2xx answer).
"""

import os
from dataclasses import dataclass

import certifi
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from clear.webhooks.targets import IPAddress, WebhookTarget, webhook_address_kind

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


def _trust() -> dict[str, str]:
    # The trust requests gave deliveries before: its CA bundle variables when an operator set them, else certifi.
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()
    return {"ca_cert_dir": bundle} if os.path.isdir(bundle) else {"ca_certs": bundle}


def _pool(*, target: WebhookTarget, address: IPAddress, timeout: float) -> urllib3.HTTPConnectionPool:
    common = {"host": str(address), "port": target.port, "timeout": urllib3.Timeout(connect=timeout, read=timeout),
              "retries": False, "maxsize": 1}
    if target.scheme == "http":
        return urllib3.HTTPConnectionPool(**common)
    return urllib3.HTTPSConnectionPool(**common, cert_reqs="CERT_REQUIRED", server_hostname=target.host, **_trust())


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
    headers = {**headers, "Host": target.host_header}
    if target.authorization:
        headers["Authorization"] = target.authorization
    error = ""
    for address in target.addresses:
        pool = _pool(target=target, address=address, timeout=timeout)
        try:
            response = pool.urlopen("POST", target.path, body=body, headers=headers, redirect=False, retries=False,
                                    preload_content=False, assert_same_host=False)
        except NewConnectionError as exc:  # refused or unreachable: the resolver's next address may work
            error = _error(exc)
            pool.close()
            continue
        except (HTTPError, OSError) as exc:
            pool.close()
            return WebhookAttempt(code=None, body="", error=_error(exc))
        try:
            excerpt = _excerpt(response) if webhook_address_kind(address=address) is None else ""
            return WebhookAttempt(code=response.status, body=excerpt, error="")
        finally:
            response.close()
            pool.close()
    return WebhookAttempt(code=None, body="", error=error)
