import os
import socket
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

# Playwright's sync API runs an event loop in the test thread; Django would then refuse ORM calls from it.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from clear.projects.models import Membership  # noqa: E402
from clear.projects.services import api_key_create, membership_add, project_create, user_get_or_create  # noqa: E402
from tests.support.fake_llm import FakeLLMServer  # noqa: E402
from tests.support.worker import CeleryWorkerProcess, purge_broker, queue_purge, use_broker  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.support.repeat"]  # --repeat-count/--repeat-id: scripts/test.sh --repeat N

# scripts/test.sh runs the suite on Postgres, then the page, API, CLI and ingestion tests again on SQLite
# (CLEAR_TEST_DATABASE=sqlite); a test of a Postgres-only fast path (COPY, advisory locks) is marked with this.
postgres_only = pytest.mark.skipif(connections[DEFAULT_DB_ALIAS].vendor != "postgresql",
                                   reason="tests a Postgres-only fast path; the portable path is tested beside it")

# Under pytest-xdist (scripts/test.sh runs the whole suite on 3 workers) each test is scheduled on its own, as with
# --dist load, except that the tests of these modules go to one worker together, those of each parameter of their
# module-scoped fixture apart: that fixture is expensive (the demo: migrations, a worker and gunicorn, ~20 s up and
# more down) and would be built on each worker, while its SQLite and Postgres demos can run on two at once.
# xdist's own --dist loadgroup cannot be used for this: on pytest 9 it no longer sees xdist_group marks.
ONE_WORKER_MODULES = {"tests/foundation/test_demo.py", "tests/foundation/test_shared_guards.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None  # a mode chosen on the command line (loadfile, loadscope, ...) is honoured as it is
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module, _, name = nodeid.partition("::")
            if module not in ONE_WORKER_MODULES:
                return nodeid
            return module + (name[name.rindex("["):] if name.endswith("]") else "")

    return ModuleGroupScheduling(config, log)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = Path(settings.SHARED_DIR)
    if not (path / "datasets").is_dir():
        pytest.fail(
            f"The shared datasets are missing at {path}/datasets. Lay `shared/` next to the checkout "
            "or set CLEAR_SHARED_DIR."
        )
    return path


def auth_throttle_clear() -> None:
    """Forget every failed login and API key counted (clear/projects/auth_throttle.py), and only those."""
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    cache = caches[settings.CLEAR_AUTH_THROTTLE_CACHE]
    if isinstance(cache, LocMemCache):
        cache.clear()  # this alias' own memory
        return
    client = cache._cache.get_client(write=True)  # Redis: FLUSHDB (cache.clear) would take other tests' keys along
    for key in client.scan_iter(match="*auth-failures:*"):
        client.delete(key)


@pytest.fixture(autouse=True)
def _auth_throttle_reset():
    # Every test client comes from 127.0.0.1: the wrong passwords and keys one test sends on purpose would otherwise
    # count against the tests after it and throttle them.
    auth_throttle_clear()
    yield


def _user(email: str):
    user, _ = user_get_or_create(email=email, password="correct horse battery staple")
    return user


@pytest.fixture
def owner(db):
    return _user("alice@example.com")


@pytest.fixture
def teammate(db):
    return _user("bob@example.com")


@pytest.fixture
def outsider(db):
    return _user("charlie@example.com")


def project_make(*, owner, teammate, name: str = "Alice's agent"):
    """Alice's project with Bob as a member (the `project` fixture; tests/frontend/conftest.py's seeds it once)."""
    project = project_create(name=name, owner=owner)
    membership_add(project=project, user=teammate, role=Membership.Role.MEMBER)
    return project


@pytest.fixture
def project(owner, teammate):
    return project_make(owner=owner, teammate=teammate)


@pytest.fixture
def outsider_project(outsider):
    return project_create(name="Charlie's agent", owner=outsider)


@pytest.fixture
def issued_key(project, owner):
    return api_key_create(project=project, name="test", created_by=owner)


@pytest.fixture
def fake_llm():
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _celery_worker_process(django_db_setup, django_db_blocker):
    broker_url = settings.CELERY_BROKER_URL
    purge_broker(broker_url)
    worker = CeleryWorkerProcess(
        log_dir=REPO_ROOT / "var" / "test-logs",
        broker_url=broker_url,
        visibility_timeout=settings.CELERY_TEST_VISIBILITY_TIMEOUT,
    )
    with django_db_blocker.unblock():
        worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def celery_worker(_celery_worker_process, transactional_db):
    """A real worker consuming from Redis; tasks sent in the test go through the broker, not eagerly."""
    worker = _celery_worker_process
    if not worker.resume():
        worker.kill()
        worker.start()
    use_broker(True)
    yield worker
    use_broker(False)
    # Work the test set off (e.g. an insights build after a run) must not outlive it: it would write while the
    # test database is flushed. The worker stops taking tasks; it is kept for the next test only when nothing is
    # running, reserved or scheduled on it, else killed, and the queue is emptied.
    if not worker.pause():
        worker.kill()
    queue_purge()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM_ARGS, chromium_path

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh context's page. Any Content-Security-Policy violation on any page it opened fails the test."""
    from tests.support.browser import CspWatch

    context = browser.new_context(viewport={"width": 1360, "height": 860})
    csp = CspWatch(context)
    page = context.new_page()
    yield page
    page.wait_for_timeout(50)  # a violation event still on its way to the test
    violations = csp.take()
    context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
