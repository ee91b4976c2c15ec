"""Where webhooks may send: public addresses only, checked when a URL is saved and again at every delivery.

A project's API key must not let its holder make Clear send requests inside Clear's own network (loopback admin
pages, cloud metadata at 169.254.169.254, private services). So a URL's host is refused when it is, or resolves to,
a loopback, private, link-local, multicast, unspecified or reserved address, IPv4 or IPv6 (IPv4-mapped, NAT64 and
6to4 addresses are judged by the IPv4 address they carry; decimal, octal and hex IPv4 spellings are resolved by the
same resolver the connection uses). `CLEAR_WEBHOOK_ALLOW_PRIVATE` lets an on-premise operator allow loopback and
private addresses; link-local, multicast, unspecified and reserved ones stay refused.

The check at saving is early feedback; the one that matters is at delivery: `webhook_target_resolve` resolves the
host once and the delivery connects to the very addresses it checked (`clear.webhooks.transport`), so a DNS answer
that changes between check and connection (rebinding) cannot reach an internal address.
"""

import dataclasses
import ipaddress
import socket
from urllib.parse import unquote, urlsplit

from django.conf import settings
from urllib3.util import make_headers

from clear.webhooks.errors import WebhookInvalidError, WebhookTargetRefusedError, WebhookTargetUnresolvedError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The kinds CLEAR_WEBHOOK_ALLOW_PRIVATE allows. Link-local stays refused whatever the setting: it holds the cloud
# metadata endpoints, never a webhook receiver.
PRIVATE_KINDS = frozenset({"loopback", "private"})
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")  # "this host on this network": Linux connects it to loopback
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known prefix; a NAT64 gateway forwards to the IPv4 inside
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclasses.dataclass(frozen=True)
class WebhookTarget:
    """A webhook URL taken apart for a pinned connection."""

    scheme: str
    host: str  # ASCII (IDNA) host name or bare address: what SNI and the certificate check use
    port: int
    path: str  # path and query, as sent in the request line
    host_header: str
    authorization: str  # a Basic header built from the URL's user:password, or ""
    addresses: tuple[IPAddress, ...] = ()  # filled by webhook_target_resolve: the only addresses to connect to


def webhook_address_kind(*, address: IPAddress) -> str | None:
    """What kind of non-public address `address` is ("loopback", "private", "link-local", "multicast",
    "unspecified", "reserved"), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return webhook_address_kind(address=embedded)
    if address.is_unspecified or (isinstance(address, ipaddress.IPv4Address) and address in _THIS_NETWORK):
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:  # is_global is true for much of multicast: asked before it
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "private"
    if address.is_private or not address.is_global:  # not global: e.g. 100.64.0.0/10, carrier-grade NAT
        return "private"
    return None


def _target_parse(*, url: str) -> WebhookTarget:
    invalid = WebhookInvalidError("url: the webhook URL must be an absolute http:// or https:// URL with a host.",
                                  extra={"fields": {"url": ["Enter an absolute http:// or https:// URL."]}})
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname or ""
        host = hostname if ":" in hostname else hostname.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):  # a bad port, a label the IDNA codec refuses
        raise invalid from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not host or port == 0:
        raise invalid
    default = _DEFAULT_PORTS[scheme]
    host_header = f"[{host}]" if ":" in host else host
    if port is not None and port != default:
        host_header += f":{port}"
    authorization = ""
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = make_headers(basic_auth=credentials)["authorization"]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return WebhookTarget(scheme=scheme, host=host, port=port or default, path=path, host_header=host_header,
                         authorization=authorization)


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(*, target: WebhookTarget) -> tuple[IPAddress, ...]:
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookTargetUnresolvedError(f"{target.host} does not resolve ({exc}).") from None
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        # A zone id (fe80::1%eth0) only ever comes with link-local addresses, which are refused.
        address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise WebhookTargetUnresolvedError(f"{target.host} has no IPv4 or IPv6 address.")
    return tuple(addresses)


def _refusal(*, target: WebhookTarget, kinds: list[str]) -> str:
    """Why the target is refused, or "" when every kind is allowed."""
    allowed = PRIVATE_KINDS if settings.CLEAR_WEBHOOK_ALLOW_PRIVATE else frozenset()
    refused = [kind for kind in kinds if kind not in allowed]
    if not refused:
        return ""
    # Only the kind, never the address: the log is read by API key holders, who need not learn internal DNS.
    how = "is not a public address" if _is_literal(target.host) else "resolves to a non-public address"
    reason = f"{target.host} {how} ({refused[0]}); webhooks reach only public addresses."
    if refused[0] in PRIVATE_KINDS:
        reason += " An operator can allow loopback and private addresses with CLEAR_WEBHOOK_ALLOW_PRIVATE."
    return reason


def _kinds(*, target: WebhookTarget, addresses: tuple[IPAddress, ...]) -> list[str]:
    kinds = [kind for kind in (webhook_address_kind(address=a) for a in addresses) if kind is not None]
    name = target.host.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761: loopback, whatever a resolver says
        kinds.insert(0, "loopback")
    return kinds


def webhook_url_check(*, url: str) -> str:
    """The URL if webhooks may send to it; otherwise a 400 that names the field `url`. A host that does not
    resolve now is accepted: every delivery resolves and checks it again."""
    target = _target_parse(url=url)
    try:
        addresses = _resolve(target=target)
    except WebhookTargetUnresolvedError:
        addresses = ()
    reason = _refusal(target=target, kinds=_kinds(target=target, addresses=addresses))
    if reason:
        raise WebhookTargetRefusedError(f"url: {reason}", extra={"fields": {"url": [reason]}})
    return url


def webhook_target_resolve(*, url: str) -> WebhookTarget:
    """The target of a delivery, resolved once: its addresses are the only ones the delivery may connect to.
    Raises WebhookTargetRefusedError (or WebhookInvalidError for a URL that no longer parses) when it must not be
    sent, WebhookTargetUnresolvedError when the name does not resolve now."""
    target = _target_parse(url=url)
    addresses = _resolve(target=target)
    reason = _refusal(target=target, kinds=_kinds(target=target, addresses=addresses))
    if reason:
        raise WebhookTargetRefusedError(reason, extra={"addresses": [str(a) for a in addresses]})
    return dataclasses.replace(target, addresses=addresses)
