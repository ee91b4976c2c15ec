"""`manage.py check` (and migrate, runserver) refuse settings the throttles would only trip over at the first login."""

from django.conf import settings
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from clear.projects.auth_throttle import auth_failure_rate, rate_parse
from clear.projects.client_address import trusted_proxies


@register()
def auth_settings_check(app_configs, **kwargs) -> list[Error]:
    errors = []
    checks = (
        ("CLEAR_AUTH_FAILURE_RATE", auth_failure_rate), ("CLEAR_TRUSTED_PROXIES", trusted_proxies),
        ("CLEAR_API_RATE", lambda: rate_parse(getattr(settings, "CLEAR_API_RATE", ""), setting="CLEAR_API_RATE")),
    )
    for setting, parse in checks:
        try:
            parse()
        except ImproperlyConfigured as exc:
            errors.append(Error(str(exc), obj=setting, id="projects.E001"))
    if getattr(settings, "CLEAR_AUTH_THROTTLE_CACHE", "default") not in settings.CACHES:
        errors.append(Error("CLEAR_AUTH_THROTTLE_CACHE names no cache of CACHES", id="projects.E002"))
    return errors
