"""Sends the guard table (clear.guards) to settings.CLEAR_GUARDS_DATABASE and nothing else there.

On SQLite that alias is a file of its own ("guards", beside the database: clear/settings/base.py), so that counting a
failed login or storing a dashboard never waits behind an ingestion holding the database's write lock. It is migrated
by `manage.py guards_migrate` (scripts/demo.sh runs it). On Postgres the table is in the database itself.
"""

from django.conf import settings

APP_LABEL = "guards"


def _alias() -> str:
    return getattr(settings, "CLEAR_GUARDS_DATABASE", "default")


class GuardsRouter:
    def db_for_read(self, model, **hints) -> str | None:
        return _alias() if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model, **hints) -> str | None:
        return _alias() if model._meta.app_label == APP_LABEL else None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints) -> bool | None:
        if app_label == APP_LABEL:
            return db == _alias()
        if db == _alias() != "default":
            return False  # the guards' own file holds their table only
        return None
