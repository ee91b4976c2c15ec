try:
    from clear.celery import app as celery_app
except ModuleNotFoundError as exc:
    # clearctl installed on its own (pip install --no-deps) needs only the standard library: no Celery, no Django.
    if exc.name not in ("celery", "django"):
        raise
    celery_app = None

__all__ = ["celery_app"]
