"""The test database is a copy of a migrated template (`CREATE DATABASE … TEMPLATE`), not migrated again in every test
process: the xdist workers of one run, and later runs of the same code on the same day, migrate once.

Migrating the schema took about 9 s of CPU per process (Django renders every migration's model state); copying the
template takes well under a second. The template's name holds a digest of the migration files and Django's version,
and the day (the span table's daily partitions are made by a migration, relative to today), so a template of other
code or of another day is never used: it is dropped when a new one is built, unless a session is connected to it.
Building and copying happen under an advisory lock of the server, so processes never copy a half-built template."""

from django.db import Error
from django.db.backends.postgresql import creation

from tests.support.db_templates import PREFIX, copy_adopt, template_name

LOCK = 0x434C454152  # pg_advisory_lock key: any constant the product never uses ("CLEAR")


class DatabaseCreation(creation.DatabaseCreation):
    def create_test_db(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        if keepdb or self.connection.settings_dict["TEST"].get("MIGRATE") is False:
            return super().create_test_db(verbosity, autoclobber, serialize, keepdb)
        test_name = self._get_test_db_name()
        template = template_name()
        with self._nodb_cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK])
            try:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
                if cursor.fetchone() is None:
                    self._template_build(template, verbosity)
                cursor.execute(f"DROP DATABASE IF EXISTS {self.connection.ops.quote_name(test_name)}")
                cursor.execute(f"CREATE DATABASE {self.connection.ops.quote_name(test_name)} "
                               f"WITH TEMPLATE {self.connection.ops.quote_name(template)}")
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
        return copy_adopt(self, test_name=test_name, template=template, verbosity=verbosity, serialize=serialize)

    def _template_build(self, template: str, verbosity: int) -> None:
        """Migrate a new template (Django's own create_test_db, under a name it gets once done), then drop the
        templates of other code or days that no run is copying."""
        test_settings = self.connection.settings_dict["TEST"]
        building = f"{template}_building"  # renamed once migrated: a killed build leaves no template to copy
        own_name, test_settings["NAME"] = test_settings.get("NAME"), building
        try:
            super().create_test_db(verbosity, autoclobber=True, serialize=False, keepdb=False)
        finally:
            test_settings["NAME"] = own_name
            self.connection.close()
        with self._nodb_cursor() as cursor:
            cursor.execute(f"ALTER DATABASE {self.connection.ops.quote_name(building)} "
                           f"RENAME TO {self.connection.ops.quote_name(template)}")
            cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                           [PREFIX.replace("_", r"\_") + "%", template])
            for (stale,) in cursor.fetchall():
                try:
                    cursor.execute(f"DROP DATABASE {self.connection.ops.quote_name(stale)}")
                except Error:
                    pass  # a session is connected to it (copies happen under the lock, so not a copy)
