"""Password reset by e-mail (Django's views, Clear's pages): the login page's "Forgot your password?" → the e-mail
form → "check your mail" (the same page whether or not the address has an account) → the mail's one-time link →
a new password → log in.

The mail's link starts with CLEAR_PUBLIC_URL when it is set, else with the address the request came to (its host is
one of ALLOWED_HOSTS, its scheme https when SECURE_PROXY_SSL_HEADER says so). A request changes nothing until the
link is used, so it cannot lock anyone out; an account gets at most CLEAR_PASSWORD_RESET_RATE mails.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.core.cache import caches
from django.http import HttpRequest
from django.urls import reverse_lazy

logger = logging.getLogger(__name__)

TEMPLATE = "frontend/password_reset.html"
_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def public_base_url(request: HttpRequest) -> str:
    """Where people reach this Clear: CLEAR_PUBLIC_URL, else the scheme and host of this request."""
    configured = (getattr(settings, "CLEAR_PUBLIC_URL", "") or "").strip().rstrip("/")
    return configured or f"{request.scheme}://{request.get_host()}"


def _parse_rate(rate: str) -> tuple[int, int] | None:
    """"3/h" → (3, 3600); empty → None (no limit). The format of CLEAR_API_RATE."""
    rate = (rate or "").strip()
    if not rate:
        return None
    count, _, period = rate.partition("/")
    try:
        return int(count), _PERIODS[period.strip()[:1]]
    except (ValueError, KeyError):
        raise ValueError(f"CLEAR_PASSWORD_RESET_RATE={rate!r}: use '<n>/<s|min|h|d>', e.g. '3/h'") from None


def reset_mail_allowed(user) -> bool:
    """Counts a reset mail to this account; False once the account had its CLEAR_PASSWORD_RESET_RATE in the window."""
    limit = _parse_rate(getattr(settings, "CLEAR_PASSWORD_RESET_RATE", ""))
    if limit is None:
        return True
    count, seconds = limit
    cache = caches[getattr(settings, "CLEAR_API_THROTTLE_CACHE", "default")]
    key = f"password_reset_mail_{user.pk}"
    cache.add(key, 0, timeout=seconds)  # the window starts with the first mail
    try:
        sent = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=seconds)
        sent = 1
    return sent <= count


class PasswordResetForm(auth_forms.PasswordResetForm):
    def get_users(self, email):
        for user in super().get_users(email):
            if reset_mail_allowed(user):
                yield user
            else:
                logger.info("password reset: no mail to user %s, CLEAR_PASSWORD_RESET_RATE reached", user.pk)


class PasswordResetView(auth_views.PasswordResetView):
    template_name = TEMPLATE
    form_class = PasswordResetForm
    email_template_name = "frontend/password_reset_email.txt"
    subject_template_name = "frontend/password_reset_subject.txt"
    success_url = reverse_lazy("frontend:password-reset-done")
    extra_context = {"step": "request"}

    def form_valid(self, form):
        self.extra_email_context = {
            "base_url": public_base_url(self.request),
            "valid_hours": max(1, round(settings.PASSWORD_RESET_TIMEOUT / 3600)),
        }
        return super().form_valid(form)


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = TEMPLATE
    extra_context = {"step": "done"}


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = TEMPLATE
    success_url = reverse_lazy("frontend:password-reset-complete")
    extra_context = {"step": "confirm"}


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = TEMPLATE
    extra_context = {"step": "complete"}
