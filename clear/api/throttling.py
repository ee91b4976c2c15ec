"""Rate limit per API key: CLEAR_API_RATE requests ("600/min") for each key in each period, counted in the
`api_throttle` cache.

A fixed window (periods counted from the epoch) counted with add and incr, which are atomic on Redis and on the guard
table (clear/guards/cache.py): requests arriving together in several web processes are all counted. DRF's own
SimpleRateThrottle reads the key's request history and writes it back, so requests sent at once overwrite each
other's entries and more than the rate get through.
"""

import math
import time

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import BaseThrottle

from clear.projects.auth_throttle import rate_parse
from clear.projects.authentication import ProjectKeyUser


class ApiKeyRateThrottle(BaseThrottle):
    window_end: float = 0.0

    @property
    def cache(self):  # resolved per request: tests override CACHES, and the alias exists only once settings loaded
        return caches[getattr(settings, "CLEAR_API_THROTTLE_CACHE", "default")]

    def allow_request(self, request, view) -> bool:
        # Read on every request rather than frozen at import, so the setting can be changed (and overridden in tests).
        rate = rate_parse(getattr(settings, "CLEAR_API_RATE", None), setting="CLEAR_API_RATE")
        key = self.get_cache_key(request, view)
        if rate is None or key is None:
            return True
        now = time.time()
        window = int(now // rate.seconds)
        self.window_end = (window + 1) * rate.seconds
        count_key, timeout = f"{key}:{window}", math.ceil(self.window_end - now) + 1
        try:
            count = self.cache.incr(count_key)  # one write per request, but the window's first
        except ValueError:
            count = 1 if self.cache.add(count_key, 1, timeout=timeout) else self.cache.incr(count_key)
        return count <= rate.limit

    def wait(self) -> float:
        return max(1.0, self.window_end - time.time())

    def get_cache_key(self, request, view) -> str | None:
        user = request.user
        if isinstance(user, ProjectKeyUser):
            return f"throttle_api_key_{user.api_key.pk}"
        if user is not None and getattr(user, "is_authenticated", False):
            return f"throttle_user_{user.pk}"  # session users of the same API (the UI)
        return None  # not authenticated: the 401 comes before any counting
