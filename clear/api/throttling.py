"""Rate limit per API key: CLEAR_API_RATE requests ("600/min") for each key, counted in the `api_throttle` cache."""

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import SimpleRateThrottle

from clear.projects.authentication import ProjectKeyUser


class ApiKeyRateThrottle(SimpleRateThrottle):
    scope = "api_key"

    @property
    def cache(self):  # resolved per request: tests override CACHES, and the alias exists only once settings loaded
        return caches[getattr(settings, "CLEAR_API_THROTTLE_CACHE", "default")]

    def get_rate(self) -> str | None:
        # Read on every request rather than frozen at import, so the setting can be changed (and overridden in tests).
        return getattr(settings, "CLEAR_API_RATE", None) or None

    def allow_request(self, request, view) -> bool:
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request, view) -> str | None:
        user = request.user
        if isinstance(user, ProjectKeyUser):
            return f"throttle_api_key_{user.api_key.pk}"
        if user is not None and getattr(user, "is_authenticated", False):
            return f"throttle_user_{user.pk}"  # session users of the same API (the UI)
        return None  # not authenticated: the 401 comes before any counting
