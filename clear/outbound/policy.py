"""Where Clear may open a connection on a project's behalf: public addresses only, for every caller.

A project's API key chooses URLs Clear then connects to (webhooks, the issue tracker's base URL, git sources, model
endpoints). Without a check it would make Clear send requests inside Clear's own network: loopback admin pages, cloud
metadata at 169.254.169.254, private services. So a host is refused when it is, or resolves to, a loopback, private,
link-local, multicast, unspecified or reserved address, IPv4 or IPv6 (IPv4-mapped, NAT64 and 6to4 addresses are
judged by the IPv4 address they carry; decimal, octal and hex IPv4 spellings go through the resolver the connection
uses, so they are judged by what they mean to it). `localhost` and `*.localhost` are loopback whatever DNS says.

Each caller is a purpose with its own schemes and its own operator settings (PURPOSES): one allows loopback and
private addresses (an on-premise tracker, a local model server); link-local, multicast, unspecified and reserved
addresses stay refused whatever the settings, since they hold the metadata endpoints and nothing a purpose needs.

The check when a URL is saved (`outbound_url_check`) is early feedback, a 400 naming the field. The one that
matters is at use: `outbound_target_resolve` resolves the host once and returns the addresses it checked, and the
connection goes to those (clear.outbound.pinned), so a DNS answer that changes in between (rebinding) reaches nothing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
from urllib.parse import unquote, urlsplit

from django.conf import settings
from urllib3.util import make_headers

from clear.errors import ClearError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PRIVATE_KINDS = frozenset({"loopback", "private"})  # what a purpose's ALLOW_PRIVATE setting lets through
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")  # "this host on this network": Linux connects it to loopback
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known prefix; a NAT64 gateway forwards to the IPv4 inside
DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22}
# git's scp-like form, [user@]host:path: a colon before any slash. A bracketed host may hold an address or, as git
# reads it, user@host:port.
_SCP = re.compile(r"^(?:(?P<user>[^@/\[\]:]+)@)?(?P<host>\[[^\]/]*\]|[^:/\[\]@]+):(?P<path>.*)$")
# A host name another program (git, curl, ssh, httpx) will parse again: plain ASCII labels, so that it cannot read
# a different host out of it than the one checked here.
_PLAIN_HOST = re.compile(r"^[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?\.?$")


@dataclasses.dataclass(frozen=True)
class Purpose:
    name: str
    noun: str  # who connects, in messages
    rule: str  # said with a refused address
    schemes: tuple[str, ...]  # accepted by default
    http_setting: str  # the setting that adds plain http; "" where http is accepted anyway
    private_setting: str  # the setting that allows loopback and private addresses
    reparsed: bool  # another program parses the URL again (git, litellm): stricter host syntax


PURPOSES = {
    "webhook": Purpose("webhook", "webhooks", "webhooks reach only public addresses", ("http", "https"), "",
                       "CLEAR_WEBHOOK_ALLOW_PRIVATE", reparsed=False),
    "tracker": Purpose("tracker", "the issue tracker", "the issue tracker is reached only at a public address",
                       ("https",), "CLEAR_TRACKER_ALLOW_HTTP", "CLEAR_TRACKER_ALLOW_PRIVATE", reparsed=False),
    "git": Purpose("git", "git sources", "git sources are read only from public addresses", ("https", "ssh"),
                   "CLEAR_GIT_ALLOW_HTTP", "CLEAR_GIT_ALLOW_PRIVATE", reparsed=True),
    "model": Purpose("model", "model endpoints", "model endpoints are called only at public addresses", ("https",),
                     "CLEAR_EVOLUTION_MODEL_ALLOW_HTTP", "CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE", reparsed=True),
}


class OutboundInvalidError(ClearError):
    """The URL cannot be used for this purpose: not a URL, a scheme the purpose does not take."""

    code = "outbound_invalid"


class OutboundRefusedError(OutboundInvalidError):
    """The host is, or resolves to, an address this purpose may not reach, or the scheme needs a setting that is
    off. At use (outbound_target_resolve) `extra["addresses"]` holds what the host resolved to: for the operator's
    log only, never for an API answer (a key holder need not learn internal DNS)."""

    code = "outbound_refused"


class OutboundUnresolvedError(ClearError):
    """The host does not resolve right now."""

    code = "outbound_unresolved"


@dataclasses.dataclass(frozen=True)
class OutboundTarget:
    """A URL taken apart for a pinned connection."""

    purpose: str
    scheme: str  # http, https or ssh
    host: str  # ASCII (IDNA) host name or bare address: what the connection's name checks (SNI, certificate) use
    port: int
    path: str  # http(s): path and query as sent in the request line; git: the repository path
    host_header: str  # http(s): the Host header
    authorization: str = ""  # http(s): a Basic header built from the URL's user:password, or ""
    user: str = ""  # the URL's user name (ssh's git@…), or ""
    addresses: tuple[IPAddress, ...] = ()  # filled by outbound_target_resolve: the only addresses to connect to


def outbound_address_kind(*, address: IPAddress) -> str | None:
    """What kind of non-public address `address` is ("loopback", "private", "link-local", "multicast",
    "unspecified", "reserved"), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return outbound_address_kind(address=embedded)
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


def _purpose(name: str) -> Purpose:
    if name not in PURPOSES:
        raise ValueError(f"unknown outbound purpose {name!r}; one of {', '.join(PURPOSES)}")
    return PURPOSES[name]


def _on(setting: str) -> bool:
    return bool(setting) and bool(getattr(settings, setting, False))


def _schemes(purpose: Purpose) -> tuple[str, ...]:
    return purpose.schemes + (("http",) if _on(purpose.http_setting) else ())


def _invalid(purpose: Purpose, field: str, problem: str = "") -> OutboundInvalidError:
    if not problem:
        forms = " or ".join(f"{scheme}://" for scheme in _schemes(purpose))
        problem = f"must be an absolute {forms} URL with a host" + (" (or user@host:path)" if purpose.name == "git"
                                                                      else "")
    return OutboundInvalidError(f"{field}: {problem}", extra={"fields": {field: [problem]}})


def _refused(field: str, problem: str, **extra) -> OutboundRefusedError:
    return OutboundRefusedError(f"{field}: {problem}", extra={"fields": {field: [problem]}, **extra})


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _host_clean(host: str, *, purpose: Purpose, field: str) -> str:
    host = host.lower()
    if ":" in host:  # an IPv6 literal: what it means is fixed
        if not _is_literal(host):
            raise _invalid(purpose, field, "holds an IPv6 address that is not one")
        return host
    if purpose.reparsed:
        if not _PLAIN_HOST.match(host):
            raise _invalid(purpose, field, "the host must be a plain ASCII name or address (punycode for others)")
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:  # a label the IDNA codec refuses
        raise _invalid(purpose, field) from None


def _scheme_check(scheme: str, *, purpose: Purpose, field: str) -> None:
    if scheme in _schemes(purpose):
        return
    if scheme == "http" and purpose.http_setting:
        raise _refused(field, f"plain http:// is refused ({purpose.noun}: https:// only); an operator can allow http "
                              f"with {purpose.http_setting}")
    raise _invalid(purpose, field)


def _http_parse(url: str, *, purpose: Purpose, field: str) -> OutboundTarget:
    authority = url.split("//", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0] if "//" in url else ""
    if "\\" in authority or (purpose.reparsed and authority.count("@") > 1):
        # Parsers disagree on such a host (urlsplit reads http://127.0.0.1\@example.com as example.com, urllib
        # and curl as 127.0.0.1): the one checked need not be the one connected to.
        raise _invalid(purpose, field, "the URL's host part may not hold a backslash or more than one '@'")
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname or ""
    except ValueError:  # a bad port
        raise _invalid(purpose, field) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not hostname or port == 0:
        raise _invalid(purpose, field)
    _scheme_check(scheme, purpose=purpose, field=field)
    host = _host_clean(hostname, purpose=purpose, field=field)
    default = DEFAULT_PORTS[scheme]
    host_header = f"[{host}]" if ":" in host else host
    if port is not None and port != default:
        host_header += f":{port}"
    authorization = ""
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = make_headers(basic_auth=credentials)["authorization"]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return OutboundTarget(purpose=purpose.name, scheme=scheme, host=host, port=port or default, path=path,
                          host_header=host_header, authorization=authorization, user=unquote(parts.username or ""))


def _scp_parse(url: str, *, purpose: Purpose, field: str) -> OutboundTarget:
    match = _SCP.match(url)
    if match is None:
        raise _invalid(purpose, field)
    user, host, port = match.group("user") or "", match.group("host"), 22
    if host.startswith("["):  # [address]:path, or git's [user@host:port]:path
        inner = host[1:-1]
        if not _is_literal(inner):
            head, _, port_text = inner.rpartition(":")
            if not head or not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise _invalid(purpose, field)
            if "@" in head:
                if user:
                    raise _invalid(purpose, field)
                user, _, head = head.rpartition("@")
            inner, port = head, int(port_text)
        host = inner
    if not host or host.startswith("-") or user.startswith("-"):  # ssh would read it as an option
        raise _invalid(purpose, field)
    if match.group("path").startswith(":"):  # git's <transport>::<address>, not a host
        raise _invalid(purpose, field)
    _scheme_check("ssh", purpose=purpose, field=field)
    host = _host_clean(host, purpose=purpose, field=field)
    return OutboundTarget(purpose=purpose.name, scheme="ssh", host=host, port=port, path=match.group("path"),
                          host_header=host, user=user)


def _ssh_parse(url: str, *, purpose: Purpose, field: str) -> OutboundTarget:
    target = _http_parse("https" + url[len("ssh"):], purpose=dataclasses.replace(purpose, schemes=("https",)),
                         field=field)
    _scheme_check("ssh", purpose=purpose, field=field)
    if target.host.startswith("-") or target.user.startswith("-"):
        raise _invalid(purpose, field)
    port = urlsplit(url).port or DEFAULT_PORTS["ssh"]
    return dataclasses.replace(target, scheme="ssh", port=port, host_header=target.host, authorization="")


def outbound_url_parse(*, url: str, purpose: str, field: str) -> OutboundTarget:
    """The URL taken apart, its scheme checked against the purpose's (no DNS yet). Git URLs may also be
    ssh://[user@]host[:port]/path or git's [user@]host:path; a local path is not a URL here. Raises
    OutboundInvalidError, or OutboundRefusedError for plain http a setting would allow; both name `field`."""
    spec = _purpose(purpose)
    if not isinstance(url, str) or not url or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise _invalid(spec, field)
    lowered = url[:8].lower()
    if spec.name == "git" and lowered.startswith("ssh://"):
        return _ssh_parse(url, purpose=spec, field=field)
    if spec.name == "git" and "://" not in url:
        return _scp_parse(url, purpose=spec, field=field)
    return _http_parse(url, purpose=spec, field=field)


def _resolve(target: OutboundTarget) -> tuple[IPAddress, ...]:
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundUnresolvedError(f"{target.host} does not resolve ({exc}).") from None
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        # A zone id (fe80::1%eth0) only ever comes with link-local addresses, which are refused.
        address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise OutboundUnresolvedError(f"{target.host} has no IPv4 or IPv6 address.")
    return tuple(addresses)


def _kinds(target: OutboundTarget, addresses: tuple[IPAddress, ...]) -> list[str]:
    kinds = [kind for kind in (outbound_address_kind(address=a) for a in addresses) if kind is not None]
    name = target.host.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761: loopback, whatever a resolver says
        kinds.insert(0, "loopback")
    return kinds


def _refusal(target: OutboundTarget, kinds: list[str]) -> str:
    """Why the target is refused, or "" when every kind is allowed."""
    spec = PURPOSES[target.purpose]
    allowed = PRIVATE_KINDS if _on(spec.private_setting) else frozenset()
    refused = [kind for kind in kinds if kind not in allowed]
    if not refused:
        return ""
    # Only the kind, never the address: refusals reach API key holders, who need not learn internal DNS.
    how = "is not a public address" if _is_literal(target.host) else "resolves to a non-public address"
    reason = f"{target.host} {how} ({refused[0]}); {spec.rule}."
    if refused[0] in PRIVATE_KINDS:
        reason += f" An operator can allow loopback and private addresses with {spec.private_setting}."
    return reason


def outbound_url_check(*, url: str, purpose: str, field: str) -> OutboundTarget:
    """The URL parsed, if `purpose` may reach it; else OutboundInvalidError or OutboundRefusedError, a 400 naming
    `field`. A host that does not resolve now is accepted: the use resolves and checks it again."""
    target = outbound_url_parse(url=url, purpose=purpose, field=field)
    try:
        addresses = _resolve(target)
    except OutboundUnresolvedError:
        addresses = ()
    reason = _refusal(target, _kinds(target, addresses))
    if reason:
        raise _refused(field, reason)
    return target


def outbound_target_resolve(*, url: str, purpose: str, field: str = "url") -> OutboundTarget:
    """The target of one use, resolved once: its `addresses` are the only ones to connect to. Raises
    OutboundRefusedError (extra["addresses"] for the operator's log), OutboundInvalidError for a URL that no longer
    parses, OutboundUnresolvedError when the name does not resolve now."""
    target = outbound_url_parse(url=url, purpose=purpose, field=field)
    addresses = _resolve(target)
    reason = _refusal(target, _kinds(target, addresses))
    if reason:
        raise OutboundRefusedError(reason, extra={"fields": {field: [reason]},
                                                  "addresses": [str(a) for a in addresses]})
    return dataclasses.replace(target, addresses=addresses)
