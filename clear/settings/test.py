"""Unit-test settings: real Postgres by default, the embedded SQLite with CLEAR_TEST_DATABASE=sqlite (under
CLEAR_VAR_DIR, which scripts/test.sh makes a fresh temporary directory); eager Celery only here, and only for unit
tests."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-" + "x" * 20)
TEST_DATABASE = os.environ.get("CLEAR_TEST_DATABASE", "postgres")
if TEST_DATABASE not in ("postgres", "sqlite"):
    raise RuntimeError(f"CLEAR_TEST_DATABASE={TEST_DATABASE!r}: use 'postgres' (the default) or 'sqlite'")
if TEST_DATABASE == "sqlite":
    os.environ.pop("DATABASE_URL", None)  # the embedded default: var/clear.sqlite3 (CLEAR_VAR_DIR)
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("CLEAR_VAR_DIR"):
        # A var dir per xdist worker, as each demo has its own: the embedded default keeps its queue, evolution
        # work trees and database there. (Subprocesses inherit it.)
        os.environ["CLEAR_VAR_DIR"] = os.path.join(os.environ["CLEAR_VAR_DIR"], os.environ["PYTEST_XDIST_WORKER"])
else:
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/clear")

from clear.settings.base import *  # noqa: E402,F401,F403

# Not what a demo in this checkout last wrote under var/ (public_url): tests expect the documented default.
CLEAR_PUBLIC_URL = os.environ.get("CLEAR_PUBLIC_URL", "")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}  # noqa: F405


def _test_redis_url(base: str, xdist_worker: str) -> str:
    """The base URL for a serial run; under pytest-xdist worker gwN gets database base + N, so that the workers'
    brokers (each with its own real Celery worker, purged with FLUSHDB) never share a queue."""
    if not xdist_worker.startswith("gw"):
        return base
    head, _, db = base.rpartition("/")
    number = (int(db) if db.isdigit() else 0) + int(xdist_worker[2:])
    if number > 15:
        raise RuntimeError(f"xdist worker {xdist_worker} would need Redis database {number} (of 0-15) from {base}: "
                           "pick a lower CLEAR_TEST_REDIS_URL database or fewer workers")
    return f"{head}/{number}"


# Tasks run eagerly unless a test starts the real worker (tests/support/worker.py), which flips this off; the
# broker is the test Redis database either way, so sending through it needs no reconfiguration.
CELERY_BROKER_URL = _test_redis_url(os.environ.get("CLEAR_TEST_REDIS_URL", "redis://127.0.0.1:6379/14"),
                                    os.environ.get("PYTEST_XDIST_WORKER", ""))
CELERY_TEST_VISIBILITY_TIMEOUT = 5
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TEST_VISIBILITY_TIMEOUT}
CELERY_BROKER_TRANSPORT = None  # the URL's (Redis), not the embedded default's filesystem transport (base.py)

# Several test runs may share this Postgres (parallel checkouts, CI beside a developer): one database each.
# SQLite: a file (not the in-memory default), so that the live server's threads and the Celery worker process see
# the same database.
DATABASES["default"].setdefault("TEST", {})["NAME"] = (  # noqa: F405
    f"test_clear_{os.getpid()}" if TEST_DATABASE == "postgres" else str(VAR_DIR / f"test_clear_{os.getpid()}.sqlite3"))  # noqa: F405
if "guards" in DATABASES:  # noqa: F405 - SQLite: the guard table's own file, one per test process like the database
    DATABASES["guards"].setdefault("TEST", {})["NAME"] = str(VAR_DIR / f"test_guards_{os.getpid()}.sqlite3")  # noqa
    DATABASES["guards"]["CONN_MAX_AGE"] = 0  # noqa: F405
    # Its table made from the model, as `manage.py guards_migrate` makes it: running every app's migrations
    # there would run the custom operations that ignore the router (traces 0005 alters traces_trace).
    DATABASES["guards"]["TEST"]["MIGRATE"] = False  # noqa: F405
if TEST_DATABASE == "postgres":
    # Django's backend, but a test that commits is cleaned up with DELETE, not TRUNCATE (tests/support/postgres_backend)
    DATABASES["default"]["ENGINE"] = "tests.support.postgres_backend"  # noqa: F405
else:  # the test database is a copy of a migrated template file (tests/support/sqlite_backend)
    DATABASES["default"]["ENGINE"] = "tests.support.sqlite_backend"  # noqa: F405
# Live-server request threads would otherwise keep connections open and block dropping the test database.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
# Unit tests count failures and cache dashboards in this process' memory, as they always did: on the guard table
# every test that logs in would need its database. tests/foundation/test_shared_guards.py runs them on the table.
if not REDIS_URL:  # noqa: F405
    for _alias in (CLEAR_API_THROTTLE_CACHE, CLEAR_AUTH_THROTTLE_CACHE, "dashboards"):  # noqa: F405
        CACHES[_alias] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": _alias}  # noqa: F405
CLEAR_OUTBOX_DISPATCH_INTERVAL = 0.0  # every request dispatches: tests observe it deterministically
# Pages show what the database holds right now: tests build data through the ORM, which no cache version sees;
# tests/frontend/test_dashboard_cache.py turns the cache on.
CLEAR_DASHBOARD_CACHE = False
