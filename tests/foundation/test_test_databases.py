"""The test database of each test process is a copy of a migrated template (issue 44: tests/support/postgres_backend
and tests/support/sqlite_backend). A copy must be the migrated schema in full: no migration unapplied, and the
template it came from is the one of this code and this day. scripts/test.sh runs this module on both databases."""

from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.support.db_templates import template_name
from tests.support.sqlite_backend.creation import templates_dir

pytestmark = pytest.mark.django_db


def test_the_copy_has_every_migration_applied():
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM django_migrations")
        assert cursor.fetchone()[0] == len(executor.loader.disk_migrations)


def test_the_template_copied_is_this_codes():
    name = template_name()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            assert cursor.fetchone() is not None
    else:
        assert (templates_dir() / f"{name}.sqlite3").is_file()
        assert Path(connection.settings_dict["NAME"]).is_file()
        assert not list(templates_dir().glob("*.building-*"))
