"""The Content-Security-Policy header of every HTML response.

Django 5.2 has no built-in one (Django 6's `django.middleware.csp` and `SECURE_CSP` can replace this on upgrade). The
pages need no inline script, inline style, `style=""` attribute nor event-handler attribute: scripts are
`frontend/static/frontend/clear.js`, styles `clear.css`, sizes computed on the server are classes (`.w-N`), and data
for scripts is a `json_script` block. `tests/frontend/test_csp.py` keeps it that way.
"""

from __future__ import annotations

from django.conf import settings

HEADER = "Content-Security-Policy"


def csp_policy() -> str:
    """The configured policy (`CLEAR_CSP`, its default in clear/settings/base.py); empty: no header."""
    return (getattr(settings, "CLEAR_CSP", "") or "").strip()


class ContentSecurityPolicyMiddleware:
    """Sets `CLEAR_CSP` on HTML responses that do not set a policy of their own."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = csp_policy()
        if policy and HEADER not in response and response.get("Content-Type", "").startswith("text/html"):
            response[HEADER] = policy
        return response
