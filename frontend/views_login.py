"""The login page: Django's LoginView behind the failed-login throttle, with every outcome in the audit log.

While the account or the address is throttled the password is not even checked (a right guess must look like a wrong
one): the form comes back with 429, Retry-After and when to try again.
"""

from __future__ import annotations

import math
from datetime import timedelta

from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from clear.projects.auth_throttle import AuthThrottledError
from clear.projects.client_address import client_address_get
from clear.projects.services import login_attempt_check, login_failure_record, login_success_record


def _wait_words(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} seconds"
    return f"{math.ceil(seconds / 60)} minutes"


class LoginView(auth_views.LoginView):
    template_name = "frontend/login.html"

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        self.address = client_address_get(meta=request.META)
        try:
            login_attempt_check(username=request.POST.get("username", ""), address=self.address)
        except AuthThrottledError as exc:
            return self._throttled(exc)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_valid(form)
        login_success_record(user=form.get_user(), address=self.address)
        return response

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        # A blank field is a slip, not a guess; a wrong pair (or an inactive account) counts.
        if self.request.POST.get("username", "").strip() and self.request.POST.get("password"):
            try:
                login_failure_record(username=self.request.POST["username"], address=self.address)
            except AuthThrottledError as exc:  # one of several sent at once, counted past the limit
                return self._throttled(exc)
        return super().form_invalid(form)

    def _throttled(self, exc: AuthThrottledError) -> HttpResponse:
        # An unbound form: a bound one would authenticate the refused password while rendering its errors.
        form = self.get_form_class()(self.request, initial={"username": self.request.POST.get("username", "")[:254]})
        at = timezone.localtime(timezone.now() + timedelta(seconds=exc.retry_after))
        context = self.get_context_data(
            form=form,
            throttled=(f"Too many failed logins from your address. Try again in {_wait_words(exc.retry_after)} "
                       f"(after {at:%H:%M} {at:%Z}); until then every login from here is refused, with the right "
                       "password too."),
        )
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response
