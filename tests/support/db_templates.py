"""What the Postgres and SQLite test backends share: the name of a migrated template, and adopting a copy of it as
the test database (tests/support/postgres_backend/creation.py, tests/support/sqlite_backend/creation.py)."""

import hashlib
from datetime import date
from pathlib import Path

import django
from django.conf import settings

PREFIX = "test_clear_tpl_"


def template_name() -> str:
    digest = hashlib.sha256(django.get_version().encode())
    for path in sorted(Path(settings.BASE_DIR).glob("*/migrations/*.py")) + sorted(
            Path(settings.BASE_DIR).glob("*/*/migrations/*.py")):
        digest.update(str(path.relative_to(settings.BASE_DIR)).encode() + b"\0" + path.read_bytes())
    return f"{PREFIX}{digest.hexdigest()[:12]}_{date.today():%Y%m%d}"


def copy_adopt(creation, *, test_name: str, template, verbosity: int, serialize: bool) -> str:
    """Make the copy `test_name` the connection's database, as Django's create_test_db does once it has migrated."""
    connection = creation.connection
    if verbosity >= 1:
        creation.log(f"Copied test database {test_name} for alias {connection.alias!r} from {template}")
    connection.close()
    settings.DATABASES[connection.alias]["NAME"] = test_name
    connection.settings_dict["NAME"] = test_name
    if serialize:
        connection._test_serialized_contents = creation.serialize_db_to_string()
    connection.ensure_connection()
    return test_name
