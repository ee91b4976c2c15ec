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
