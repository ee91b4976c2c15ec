"""Counters of failed logins and failed API keys, per (account, client address) and per client address.

CLEAR_AUTH_FAILURE_RATE ("10/15min": 10 failures in a window of 15 minutes that opens at the first failure) is applied
to both counters. At the limit every attempt they cover is refused until the window ends, the right password or key
too: otherwise a guesser would learn which guess was right. No counter covers an account from every address, so a
stranger cannot lock a user out: the user's own address has its own counters. Logins and API keys are counted apart
(realm), so a client sending a stale key does not lock its developer out of the UI.

The counters live in the CLEAR_AUTH_THROTTLE_CACHE cache (Redis when there is one, else the guard table of
clear/guards/: either way every web process counts against the same limit). Only add and incr change them, and both
are atomic there, so concurrent failures are never lost; the window's end is stored beside its count and compared with
`clock()`, the cache's expiry only collects what is over. Attempts sent at once all pass the check before any of them
is counted: the failures counted past the limit are answered 429 too (auth_failure_over_limit), so that no more than
the limit are ever answered "wrong" in a window, however many arrive together.
"""

import hashlib
import ipaddress
import math
import re
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured

from clear.errors import ThrottledError

LOGIN = "login"
API_KEY = "api_key"

_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400,
          "day": 86400}
_RATE = re.compile(r"(\d+)/(\d*)([a-z]+)")


@dataclass(frozen=True)
class Rate:
    limit: int
    seconds: int


def rate_parse(value: str | None, *, setting: str = "CLEAR_AUTH_FAILURE_RATE") -> Rate | None:
    """'<n>/<period>' as CLEAR_API_RATE writes it ('600/min'), the period optionally a multiple ('10/15min',
    '5/30s'); empty: no limit."""
    text = (value or "").replace(" ", "").lower()
    if not text:
        return None
    match = _RATE.fullmatch(text)
    unit = match[3] if match else ""
    if unit not in _UNITS and unit.endswith("s"):
        unit = unit[:-1]  # "15mins", "2hours"
    if match is None or unit not in _UNITS or int(match[1]) < 1 or int(match[2] or 1) < 1:
        raise ImproperlyConfigured(
            f"{setting}={value!r} is not a rate: write '<n>/<period>' with a period of s, min, h or d, optionally "
            "a multiple ('10/15min', '600/min', '5/30s'); empty: no limit")
    return Rate(limit=int(match[1]), seconds=int(match[2] or 1) * _UNITS[unit])


def auth_failure_rate() -> Rate | None:
    # Read on every call rather than frozen at import, so that it can be changed (and overridden in tests).
    return rate_parse(getattr(settings, "CLEAR_AUTH_FAILURE_RATE", ""))


def clock() -> float:
    """The throttle's time (tests move it instead of sleeping)."""
    return time.time()


def _cache():
    return caches[getattr(settings, "CLEAR_AUTH_THROTTLE_CACHE", "default")]


class AuthThrottledError(ThrottledError):
    code = "auth_throttled"

    def __init__(self, message: str, *, retry_after: int, scope: str, first_in_window: bool):
        super().__init__(message, retry_after=retry_after)
        self.scope = scope  # "address" or "account"
        self.first_in_window = first_in_window  # the first refusal of this window: worth a log line and an event


def _address_scope(address: str) -> str:
    """An IPv6 client holds a whole /64, so that is what one address counts as."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address or "unknown"
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def _counters(*, realm: str, account: str | None, address: str) -> list[tuple[str, str]]:
    """(scope, cache key) of the counters an attempt falls under; accounts are hashed, never stored as typed."""
    where = _address_scope(address)

    def key(*parts: str) -> str:
        return "auth-failures:" + hashlib.sha256("\0".join((realm, *parts)).encode()).hexdigest()[:40]

    counters = [("address", key(where))]
    if account:
        counters.append(("account", key(where, account)))
    return counters


def _count_key(key: str, end: float) -> str:
    return f"{key}:{end:.3f}"  # a window's count is its own key: a new window never inherits an old count


def auth_throttle_check(*, realm: str, account: str | None, address: str) -> None:
    """Raise AuthThrottledError while a counter covering this attempt is at the limit."""
    rate = auth_failure_rate()
    if rate is None:
        return
    cache, now = _cache(), clock()
    counters = _counters(realm=realm, account=account, address=address)
    ends = cache.get_many([f"{key}:end" for _, key in counters])
    open_windows = [(scope, key, ends[f"{key}:end"]) for scope, key in counters
                    if ends.get(f"{key}:end") is not None and ends[f"{key}:end"] > now]
    if not open_windows:
        return
    counts = cache.get_many([_count_key(key, end) for _, key, end in open_windows])
    for scope, key, end in open_windows:
        if (counts.get(_count_key(key, end)) or 0) >= rate.limit:
            retry_after = max(1, math.ceil(end - now))
            first = cache.add(_count_key(key, end) + ":refused", 1, timeout=retry_after)
            what = "logins" if realm == LOGIN else "API keys"
            raise AuthThrottledError(
                f"Too many failed {what} from this address; try again in {retry_after} seconds (Retry-After).",
                retry_after=retry_after, scope=scope, first_in_window=bool(first))


def auth_failure_add(*, realm: str, account: str | None, address: str) -> int:
    """Count one failure under each counter; the highest count after it."""
    rate = auth_failure_rate()
    if rate is None:
        return 0
    cache, now, highest = _cache(), clock(), 0
    for _, key in _counters(realm=realm, account=account, address=address):
        end = cache.get(f"{key}:end")
        if end is None or end <= now:
            if end is not None:  # over by our clock while the cache still holds it (clock skew, a test's clock)
                cache.delete(f"{key}:end")
            cache.add(f"{key}:end", now + rate.seconds, timeout=rate.seconds)
            end = cache.get(f"{key}:end") or now + rate.seconds  # the window a concurrent failure opened wins
        count_key = _count_key(key, end)
        cache.add(count_key, 0, timeout=max(1, math.ceil(end - now)))
        try:
            count = cache.incr(count_key)
        except ValueError:  # expired between add and incr
            cache.set(count_key, 1, timeout=max(1, math.ceil(end - now)))
            count = 1
        highest = max(highest, count)
    return highest


def auth_failure_over_limit(*, count: int) -> bool:
    """Whether the failure that auth_failure_add counted as `count` went past the limit (it passed the check while
    concurrent failures were being counted): its answer is the refusal the next attempt would get."""
    rate = auth_failure_rate()
    return rate is not None and count > rate.limit


def auth_failures_forget(*, realm: str, account: str, address: str) -> None:
    """After a success: the account's typos from this address are forgiven; the address' count stays."""
    scope, key = _counters(realm=realm, account=account, address=address)[-1]
    if scope == "account":
        _cache().delete(f"{key}:end")
