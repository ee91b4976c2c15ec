"""Which of the worker's environment variables a backend may hand to a coding agent as its API key (issue 22).

A job's backend config names the variable (`api_key_env`), and whoever can start a job could otherwise name any of
the worker's: SECRET_KEY, DATABASE_URL. Only the names the operator lists in CLEAR_EVOLUTION_BACKEND_ENV_ALLOW are
taken, checked when the backend is built: at job creation, and again at each run (a job saved before the list
existed, or after the operator shortened it).
"""

from __future__ import annotations

from django.conf import settings

from evolution.errors import BackendError

FIELD = "backend_config.api_key_env"


def api_key_env_check(*, name: str | None, backend: str) -> None:
    if not name:
        return
    allowed = [str(item) for item in settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW]
    if name in allowed:
        return
    problem = (f"{name!r} is not a variable backends may read; the operator lists those in the setting "
               f"CLEAR_EVOLUTION_BACKEND_ENV_ALLOW ({', '.join(allowed) or 'none'})")
    raise BackendError(f"{backend} backend: {FIELD}: {problem}", extra={"fields": {FIELD: problem}})


MODEL_FIELDS = {"external": "model_url", "litellm": "api_base"}


def model_host_check(*, backend: str, config: dict, default_url: str | None = None) -> None:
    """A job started through the API or the web UI talks to a model host the operator lists
    (CLEAR_EVOLUTION_MODEL_HOSTS): the key named by api_key_env goes there, and the litellm backend calls it from
    the worker itself, so a free URL would hand the key to any host or reach the worker's internal network."""
    from urllib.parse import urlsplit

    field = MODEL_FIELDS.get(backend)
    url = config.get(field) if field else None
    if url is None:
        url = default_url
    if not url:
        return
    where = f"backend_config.{field}"
    try:
        parts = urlsplit(str(url))
        host = (parts.hostname or "").lower()
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    except ValueError:
        host, port = "", None
    allowed = [str(item).lower() for item in settings.CLEAR_EVOLUTION_MODEL_HOSTS]
    if host and port and (host in allowed or f"{host}:{port}" in allowed):
        return
    problem = ("not a model host the operator allows; the setting CLEAR_EVOLUTION_MODEL_HOSTS lists them "
               f"({', '.join(allowed) or 'none'})")
    raise BackendError(f"{backend} backend: {where}: {problem}", extra={"fields": {where: problem}})
