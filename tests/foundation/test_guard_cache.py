"""The guard cache (clear/guards/cache.py): the store of the throttles and the dashboard cache when there is no Redis.
A cache like Django's, except that `incr` and `add` are atomic: increments sent at once by several threads or
processes are all counted (Django's DatabaseCache reads and writes back, and loses some), and one add wins.

The in-process tests run on the test database's guard table (on SQLite its own file, the "guards" alias; on Postgres
the database itself); the multi-process one on a fresh embedded default (SQLite files under a temporary var dir).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

ROOT = Path(settings.BASE_DIR)


@pytest.fixture
def cache():
    from clear.guards.cache import GuardCache

    guard_cache = GuardCache("test-guards", {})
    guard_cache.clear()
    yield guard_cache
    guard_cache.clear()


def _in_threads(count: int, work) -> list:
    """`work(n)` in `count` threads at once, each on its own database connection (closed after, so that the test
    database can be dropped)."""

    def run(n: int):
        try:
            return work(n)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


@pytest.mark.django_db(databases="__all__")
def test_it_is_a_django_cache(cache):
    from clear.guards.models import GuardEntry

    assert cache.get("missing", "default") == "default"
    cache.set("object", {"figures": [1, 2.5], "at": "x"})
    cache.set("flag", True)
    cache.set("big", 2**70)
    assert cache.get_many(["object", "flag", "big", "missing"]) == {
        "object": {"figures": [1, 2.5], "at": "x"}, "flag": True, "big": 2**70}
    assert cache.get("flag") is True

    assert cache.add("count", 0) and not cache.add("count", 5)
    assert [cache.incr("count"), cache.incr("count", 3), cache.decr("count")] == [1, 4, 3]
    with pytest.raises(ValueError):
        cache.incr("missing")
    with pytest.raises(ValueError):
        cache.incr("object")  # not an integer

    cache.set_many({"a": 1, "b": "two"}, timeout=60)
    assert cache.has_key("a") and cache.delete("a") and not cache.delete("a") and not cache.has_key("a")
    cache.delete_many(["b", "count"])
    assert cache.get_many(["b", "count"]) == {}

    other = type(cache)("other-guards", {})
    other.set("object", "theirs")
    cache.clear()  # this cache's entries only
    assert cache.get("object") is None and other.get("object") == "theirs"
    assert GuardEntry.objects.filter(key__startswith="other-guards/").count() == 1
    other.clear()


@pytest.mark.django_db(databases="__all__")
def test_expired_entries_are_gone_and_can_be_added_again(cache):
    cache.add("window", 0, timeout=1)
    cache.set("figures", "x", timeout=1)
    cache.set("kept", "y", timeout=None)
    assert cache.touch("figures", timeout=100)
    time.sleep(1.2)
    assert cache.get_many(["window", "figures", "kept"]) == {"figures": "x", "kept": "y"}
    with pytest.raises(ValueError):
        cache.incr("window")  # expired: a new window starts with add, never from the old count
    assert cache.add("window", 0, timeout=10) and cache.incr("window") == 1
    cache.set("gone", "z", timeout=0)
    assert cache.get("gone") is None


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_increments_from_threads_at_once_are_all_counted(cache):
    cache.add("failures", 0, timeout=600)
    counts = [count for chunk in _in_threads(8, lambda _: [cache.incr("failures") for _ in range(25)])
              for count in chunk]
    # Each increment saw its own count: none was lost, none read back a neighbour's.
    assert sorted(counts) == list(range(1, 201))
    assert cache.get("failures") == 200


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_one_add_of_many_at_once_wins(cache):
    won = _in_threads(12, lambda n: cache.add("window:end", n, timeout=600))
    assert won.count(True) == 1
    assert cache.get("window:end") == won.index(True)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_api_rate_limit_counts_requests_sent_at_once(settings, issued_key):
    """CLEAR_API_RATE on the guard table: of 12 requests with one key at once, exactly the rate get through (DRF's own
    throttle writes back the history it read, and lets more through)."""
    from rest_framework.test import APIClient

    settings.CLEAR_API_RATE = "5/d"  # a window that does not end during the test
    settings.CACHES = {**settings.CACHES, settings.CLEAR_API_THROTTLE_CACHE: {
        "BACKEND": "clear.guards.cache.GuardCache", "LOCATION": "api-throttle-test"}}
    bearer = f"Bearer {issued_key.secret}"
    statuses = _in_threads(12, lambda _: APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=bearer).status_code)
    assert sorted(statuses) == [200] * 5 + [429] * 7


_INCREMENTS = """
import json, os, sys, time
import django
django.setup()
from django.core.cache import caches
cache, ready = caches["auth_throttle"], sys.argv[1]
cache.add("failures", 0, timeout=600)
open(os.path.join(ready, str(os.getpid())), "w").close()
while len(os.listdir(ready)) < int(sys.argv[2]):  # all processes up: they increment at once
    time.sleep(0.01)
print(json.dumps([cache.incr("failures") for _ in range(int(sys.argv[3]))]))
"""


def test_processes_on_one_sqlite_file_lose_no_increment(tmp_path):
    """Four web processes' worth of failures on the embedded default, counted in var/clear-guards.sqlite3."""
    drop = {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "DEBUG"}
    env = {name: value for name, value in os.environ.items() if name not in drop}
    env.update(CLEAR_VAR_DIR=str(tmp_path / "var"), SECRET_KEY="guard-cache-test-" + "x" * 40,
               DJANGO_SETTINGS_MODULE="clear.settings.base")
    subprocess.run([sys.executable, "manage.py", "guards_migrate", "-v", "0"],
                   cwd=ROOT, env=env, check=True, timeout=120)
    ready = tmp_path / "ready"
    ready.mkdir()
    processes = [subprocess.Popen([sys.executable, "-c", _INCREMENTS, str(ready), "4", "100"], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    counts = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        counts += json.loads(out)
    assert sorted(counts) == list(range(1, 401))
    assert (tmp_path / "var" / "clear-guards.sqlite3").is_file()
    assert not (tmp_path / "var" / "clear.sqlite3").exists(), "the counters stay off the main database"
