"""Absolute links from tickets to Clear's pages: a ticket is read outside Clear (an issue tracker, an exported file),
where a relative link leads nowhere, and no request is at hand to take the host from. CLEAR_PUBLIC_URL says how
people reach this Clear (default http://127.0.0.1:8000, the demo's address)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse


def public_url(path: str) -> str:
    base = (getattr(settings, "CLEAR_PUBLIC_URL", "") or "http://127.0.0.1:8000").rstrip("/")
    return base + path


def insight_url(*, slug: str, insight_id: int) -> str:
    return public_url(reverse("frontend:insight", kwargs={"slug": slug, "insight_id": insight_id}))


def span_url(*, slug: str, trace_id: str, span_id: str) -> str:
    """The trace viewer, opened at the span."""
    path = reverse("frontend:trace", kwargs={"slug": slug, "trace_id": trace_id})
    return public_url(f"{path}?{urlencode({'span': span_id})}" if span_id else path)
