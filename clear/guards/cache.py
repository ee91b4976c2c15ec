"""A Django cache over the guard table (GuardEntry), for when there is no Redis: every web process sees the same
entries, so the throttles count against one limit and the dashboards show one "as of" time.

Django's own DatabaseCache would share them too, but its `incr` is a read and a write: two processes counting a
failure at once both read 9 and both write 10. Here `incr` is one UPDATE ... SET count = count + delta and `add` an
INSERT that the primary key refuses when the entry exists, so concurrent counts are never lost (what
clear/projects/auth_throttle.py and clear/api/throttling.py rely on). `LOCATION` names the cache's share of the table
(`clear()` empties only that). Expired rows are ignored when read and deleted at most once a minute per thread.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.db import IntegrityError, router, transaction
from django.db.models import F, Q, QuerySet

from clear.guards.models import GuardEntry

_CULL_EVERY_SECONDS = 60.0
_COUNT_RANGE = range(-(2**63), 2**63)  # what the count column (64-bit) holds; larger integers are pickled


class GuardCache(BaseCache):
    def __init__(self, location: str, params: dict):
        super().__init__(params)
        self._prefix = f"{location or 'default'}/"
        self._culled_at = 0.0

    # --- reads ---------------------------------------------------------------------------------------------------

    def get(self, key: str, default: Any = None, version: int | None = None) -> Any:
        row = self._live(time.time()).filter(key=self._key(key, version)).values_list("value", "count").first()
        return default if row is None else _decoded(*row)

    def get_many(self, keys, version: int | None = None) -> dict:
        wanted = {self._key(key, version): key for key in keys}
        if not wanted:
            return {}
        rows = self._live(time.time()).filter(key__in=list(wanted)).values_list("key", "value", "count")
        return {wanted[stored]: _decoded(value, count) for stored, value, count in rows}

    def has_key(self, key: str, version: int | None = None) -> bool:
        return self._live(time.time()).filter(key=self._key(key, version)).exists()

    # --- writes --------------------------------------------------------------------------------------------------

    def set(self, key: str, value: Any, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        self.set_many({key: value}, timeout=timeout, version=version)

    def set_many(self, data: dict, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> list:
        expires_at = self.get_backend_timeout(timeout)
        rows = [_row(self._key(key, version), value, expires_at) for key, value in data.items()]
        if rows:
            self._objects().bulk_create(rows, update_conflicts=True, unique_fields=["key"],
                                        update_fields=["value", "count", "expires_at"])
        self._cull()
        return []

    def add(self, key: str, value: Any, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        stored, now = self._key(key, version), time.time()
        with transaction.atomic(using=self._db()):
            self._objects().filter(key=stored, expires_at__lte=now).delete()  # an expired entry is no entry
            try:
                with transaction.atomic(using=self._db()):
                    _row(stored, value, self.get_backend_timeout(timeout)).save(using=self._db(), force_insert=True)
            except IntegrityError:  # it exists, or a concurrent add just made it: that one wins
                return False
        self._cull()
        return True

    def incr(self, key: str, delta: int = 1, version: int | None = None) -> int:
        stored, now = self._key(key, version), time.time()
        with transaction.atomic(using=self._db()):
            # The row (on SQLite the file) stays locked until the commit: the count read back is this increment's.
            entry = self._live(now).filter(key=stored)
            if not entry.filter(count__isnull=False).update(count=F("count") + delta):
                raise ValueError(f"Key '{key}' not found, or not an integer")
            return entry.values_list("count", flat=True).get()

    def touch(self, key: str, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        entry = self._live(time.time()).filter(key=self._key(key, version))
        return bool(entry.update(expires_at=self.get_backend_timeout(timeout)))

    def delete(self, key: str, version: int | None = None) -> bool:
        deleted, _ = self._objects().filter(key=self._key(key, version)).delete()
        return bool(deleted)

    def delete_many(self, keys, version: int | None = None) -> None:
        stored = [self._key(key, version) for key in keys]
        if stored:
            self._objects().filter(key__in=stored).delete()

    def clear(self) -> None:
        self._objects().filter(key__startswith=self._prefix).delete()

    # --- helpers -------------------------------------------------------------------------------------------------

    def _key(self, key: str, version: int | None) -> str:
        return self._prefix + self.make_and_validate_key(key, version=version)

    def _db(self) -> str:
        return router.db_for_write(GuardEntry)

    def _objects(self) -> QuerySet:
        return GuardEntry.objects.using(self._db())

    def _live(self, now: float) -> QuerySet:
        return self._objects().filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))

    def _cull(self) -> None:
        now = time.time()
        if now - self._culled_at >= _CULL_EVERY_SECONDS:
            self._culled_at = now
            self._objects().filter(expires_at__lte=now).delete()


def _row(key: str, value: Any, expires_at: float | None) -> GuardEntry:
    if type(value) is int and value in _COUNT_RANGE:  # not bool: True must come back as True, not 1
        return GuardEntry(key=key, value=None, count=value, expires_at=expires_at)
    return GuardEntry(key=key, value=pickle.dumps(value, pickle.HIGHEST_PROTOCOL), count=None, expires_at=expires_at)


def _decoded(value: bytes | memoryview | None, count: int | None) -> Any:
    return count if count is not None else pickle.loads(bytes(value))
