"""SQLite for the test database: Django's own backend, except that the test database file is a copy of a migrated
template (creation.py), as on Postgres (tests/support/postgres_backend)."""

from django.db.backends.sqlite3 import base

from .creation import DatabaseCreation


class DatabaseWrapper(base.DatabaseWrapper):
    creation_class = DatabaseCreation
