"""The SQLite test database is a file copy of a migrated template, not migrated again in every test process: the
xdist workers of one run, and later runs of the same code on the same day, migrate once (issue 44).

The template is named as the Postgres one (tests/support/db_templates.py `template_name`: a digest of
the migration files and Django's version, and the day) and kept under the checkout's var/test-templates/, outside
the per-run CLEAR_VAR_DIR, so that the next run finds it. Building and copying happen under a file lock; a template
is built under a temporary name and renamed once migrated, so a killed build leaves nothing to copy."""

import fcntl
import os
import shutil
from pathlib import Path

from django.conf import settings
from django.db.backends.sqlite3 import creation

from tests.support.db_templates import copy_adopt, template_name


def templates_dir() -> Path:
    return Path(settings.BASE_DIR) / "var" / "test-templates"


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class DatabaseCreation(creation.DatabaseCreation):
    def create_test_db(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        test_name = self._get_test_db_name()
        if (keepdb or self.connection.settings_dict["TEST"].get("MIGRATE") is False
                or self.is_in_memory_db(test_name)):
            return super().create_test_db(verbosity, autoclobber, serialize, keepdb)
        directory = templates_dir()
        directory.mkdir(parents=True, exist_ok=True)
        template = directory / f"{template_name()}.sqlite3"
        with (directory / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            if not template.exists():
                self._template_build(template, verbosity)
            _remove(Path(test_name))
            shutil.copyfile(template, test_name)
        return copy_adopt(self, test_name=test_name, template=template, verbosity=verbosity, serialize=serialize)

    def _template_build(self, template: Path, verbosity: int) -> None:
        """Migrate a new template (Django's own create_test_db, under a name it gets once done), then remove the
        templates of other code or days."""
        test_settings = self.connection.settings_dict["TEST"]
        building = template.with_name(f"{template.stem}.building-{os.getpid()}.sqlite3")
        own_name, test_settings["NAME"] = test_settings.get("NAME"), str(building)
        try:
            super().create_test_db(verbosity, autoclobber=True, serialize=False, keepdb=False)
            with self.connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself, for the copy
        finally:
            test_settings["NAME"] = own_name
            self.connection.close()
        os.replace(building, template)
        _remove(building)
        for stale in template.parent.glob("*.sqlite3*"):
            if not stale.name.startswith(template.stem) or ".building-" in stale.name:
                stale.unlink(missing_ok=True)
