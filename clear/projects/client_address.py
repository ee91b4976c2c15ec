"""The address a request came from, as the throttles and the audit log see it.

REMOTE_ADDR, unless it is one of CLEAR_TRUSTED_PROXIES: then X-Forwarded-For is read from the right (each proxy appends
the address it received from), skipping trusted proxies, and the first untrusted address is the client. Entries left
of it were written by the client itself and prove nothing, so they are never used.
"""

import ipaddress
from collections.abc import Iterable, Mapping
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    try:
        return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"CLEAR_TRUSTED_PROXIES={','.join(entries)!r}: {exc}; list proxy addresses or CIDRs, e.g. 10.0.0.0/8"
        ) from None


def trusted_proxies(entries: Iterable[str] | None = None) -> tuple[IPNetwork, ...]:
    if entries is None:
        entries = getattr(settings, "CLEAR_TRUSTED_PROXIES", None) or ()
    if isinstance(entries, str):
        entries = entries.split(",")
    return _networks(tuple(entries))


def _parse(value: str) -> IPAddress | None:
    value = value.strip()
    if value.startswith("[") and "]" in value:  # "[2001:db8::1]:443"
        value = value[1:value.index("]")]
    elif value.count(":") == 1:  # "203.0.113.9:51234"
        value = value.partition(":")[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _trusted(address: IPAddress, networks: tuple[IPNetwork, ...]) -> bool:
    return any(address.version == network.version and address in network for network in networks)


def client_address_get(*, meta: Mapping[str, str]) -> str:
    """The client's address from a request's META (Django's or DRF's request.META); "" if REMOTE_ADDR is missing."""
    remote = _parse(meta.get("REMOTE_ADDR") or "")
    if remote is None:
        return ""
    networks = trusted_proxies()
    if not networks or not _trusted(remote, networks):
        return str(remote)
    hops = [hop for hop in (meta.get("HTTP_X_FORWARDED_FOR") or "").split(",") if hop.strip()]
    client = remote
    for hop in reversed(hops):
        address = _parse(hop)
        if address is None:
            break  # a trusted proxy would not have written this: keep the last address a trusted hop vouched for
        client = address
        if not _trusted(address, networks):
            break
    return str(client)
