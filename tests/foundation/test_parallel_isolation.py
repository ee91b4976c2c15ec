"""Under pytest-xdist (scripts/test.sh runs the whole suite on 2 workers) every worker gets its own Redis database:
each starts a real Celery worker on it and FLUSHes it between tests."""

import pytest

from clear.settings.test import _test_redis_url


def test_a_serial_run_keeps_the_configured_database():
    assert _test_redis_url("redis://127.0.0.1:6379/14", "") == "redis://127.0.0.1:6379/14"


def test_each_xdist_worker_gets_the_next_database():
    assert [_test_redis_url("redis://127.0.0.1:6379/9", f"gw{n}") for n in range(2)] == [
        "redis://127.0.0.1:6379/9", "redis://127.0.0.1:6379/10"]
    assert _test_redis_url("redis://127.0.0.1:6379/14", "gw1") == "redis://127.0.0.1:6379/15"


def test_a_worker_past_the_last_database_is_refused_rather_than_sharing_one():
    with pytest.raises(RuntimeError, match="Redis database 16"):
        _test_redis_url("redis://127.0.0.1:6379/14", "gw2")
