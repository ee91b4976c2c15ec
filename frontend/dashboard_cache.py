"""Cached dashboard aggregates: the overview's trace figures, the workflow graph and the per-node figures.

Those pages aggregate tens of thousands of traces or spans (100-500 ms on a 1M-span project), while what they show
changes only when traces arrive, a diagnosis run progresses or a verdict is marked wrong. So each aggregate is
cached per project and filter, with the data version it was computed from:

* judge-side changes (a run's state or progress, a verdict marked wrong or unmarked) invalidate it at once: the
  engineer who just marked a verdict wrong sees the pass rates move on the next page view;
* newly received traces invalidate it after at most CLEAR_DASHBOARD_CACHE_SECONDS (default 30): a project
  ingesting continuously would otherwise recompute the graph on every view;
* nothing is older than MAX_AGE_SECONDS (what no version covers, e.g. traces deleted by retention).

While one request recomputes a stale trace-side entry, the others keep serving it (no stampede of 500 ms queries).
The data version is three small aggregates by index (~1 ms). CLEAR_DASHBOARD_CACHE=0 turns all of it off.
The cache is Redis, else the guard table (clear/guards/): one entry for every web process, so that reloads answered
by different gunicorn workers show the same figures and the same "as of" time.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypeVar

from django.conf import settings
from django.core.cache import caches
from django.db.models import Count, Max, Sum

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, FeedbackCorrection
from traces.models import Trace

logger = logging.getLogger(__name__)
CACHE_ALIAS = "dashboards"
# The number after "v" changes whenever what an aggregate holds changes shape, so no page reads an entry cached by
# an older release (issue 26: the overview's failing-traces count).
KEY_PREFIX = "clear:dashboard:v2:"
MAX_AGE_SECONDS = 600
_LOCK_SECONDS = 60

T = TypeVar("T")


@dataclass(frozen=True)
class DataVersion:
    traces: str  # the newest receipt of a span
    judged: str  # every run's state and progress, and the verdicts marked wrong


@dataclass(frozen=True)
class Cached:
    value: object
    computed_at: datetime


def data_version(*, project: Project) -> DataVersion:
    """Three small aggregates, each served by a (project, ...) index: the newest receipt; the runs grouped by state
    (counts and progress only grow as a run goes on, and a deleted run lowers them); the corrections."""
    newest = Trace.objects.filter(project=project).aggregate(at=Max("last_received_at"))["at"]
    runs = (DiagnosisRun.objects.filter(project=project).values_list("status", "insights_status")
            .annotate(n=Count("pk"), done=Sum("done_count"), last=Max("created_at"))
            .order_by("status", "insights_status"))
    corrections = FeedbackCorrection.objects.filter(project=project).aggregate(n=Count("pk"), last=Max("pk"))
    return DataVersion(traces=newest.isoformat() if newest else "",
                       judged=repr((list(runs), corrections["n"], corrections["last"])))


def aggregate_key(*, project: Project, name: str, params: tuple) -> str:
    return f"{KEY_PREFIX}{project.pk}:{name}:{hashlib.sha1(repr(params).encode()).hexdigest()[:16]}"


def dashboard_aggregate(*, project: Project, name: str, params: tuple, compute: Callable[[], T]) -> Cached:
    """`compute()` (picklable), or the cached result of an earlier call for the same project, name and params if
    the data it was computed from is still current (see the module docstring). With the cache unreachable (Redis
    down) the page is computed, not broken."""
    if not settings.CLEAR_DASHBOARD_CACHE:
        return Cached(value=compute(), computed_at=_now())
    cache = caches[CACHE_ALIAS]
    key = aggregate_key(project=project, name=name, params=params)
    version = data_version(project=project)
    try:
        entry = cache.get(key)
        if entry is not None:
            entry_version, stored_at, value = entry
            age = time.time() - stored_at
            if entry_version.judged == version.judged and age < MAX_AGE_SECONDS:
                if entry_version.traces == version.traces or age < settings.CLEAR_DASHBOARD_CACHE_SECONDS:
                    return Cached(value=value, computed_at=_at(stored_at))
                if not cache.add(f"{key}:lock", 1, _LOCK_SECONDS):  # someone is recomputing: serve this meanwhile
                    return Cached(value=value, computed_at=_at(stored_at))
    except Exception as exc:  # noqa: BLE001 - any cache failure (connection refused, timeout, bad pickle)
        logger.warning("dashboard cache unavailable (%s): computing %s without it", exc, name)
        return Cached(value=compute(), computed_at=_now())
    value = compute()
    stored_at = time.time()
    try:
        cache.set(key, (version, stored_at, value), MAX_AGE_SECONDS)
        cache.delete(f"{key}:lock")
    except Exception as exc:  # noqa: BLE001
        logger.warning("dashboard cache unavailable (%s): %s not stored", exc, name)
    return Cached(value=value, computed_at=_at(stored_at))


def _at(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, tz=timezone.utc)


def _now() -> datetime:
    return _at(time.time())
