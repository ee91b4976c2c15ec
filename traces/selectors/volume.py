"""The overview's trace volume over trace time (when each trace started, not when Clear received it).

Every trace with a start time is counted in a bucket, however far apart the traces are: stretches of a week or more
without a trace are cut out of the axis (a marked break) instead of widening it, so a bucket size that fits the
traces shown is kept when one trace arrives months after the rest, and none is left outside a window."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db.models import Count, Max, Min, Q
from django.db.models.functions import Trunc

from clear.projects.models import Project
from traces.models import Trace

UNITS = ("minute", "hour", "day", "week", "month")
_STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1),
          "week": timedelta(weeks=1)}
MAX_SLOTS = 96  # bars and breaks: the chart stays readable at 760 px
SKIP_AFTER = timedelta(days=7)  # a stretch at least this long without a trace is cut out of the axis


@dataclass
class VolumeBucket:
    start: datetime
    total: int = 0
    failures: int = 0
    successes: int = 0
    skipped_before: timedelta | None = None  # the stretch without traces cut out of the axis just before it

    @property
    def judged(self) -> int:
        return self.failures + self.successes

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.judged if self.judged else None


@dataclass
class VolumeSeries:
    unit: str  # minute | hour | day | week | month
    buckets: list[VolumeBucket] = field(default_factory=list)
    undated: int = 0  # traces without a start time: they have no place on a time axis

    @property
    def skips(self) -> int:
        return sum(1 for b in self.buckets if b.skipped_before is not None)


def floor_to(moment: datetime, unit: str) -> datetime:
    moment = moment.astimezone(dt_timezone.utc)
    if unit == "minute":
        return moment.replace(second=0, microsecond=0)
    if unit == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "month":
        return day.replace(day=1)
    return day - timedelta(days=day.weekday()) if unit == "week" else day


def step_after(moment: datetime, unit: str) -> datetime:
    if unit == "month":
        return moment.replace(year=moment.year + moment.month // 12, month=moment.month % 12 + 1)
    return moment + _STEPS[unit]


def _buckets_between(lo: datetime, hi: datetime, unit: str) -> int:
    lo, hi = floor_to(lo, unit), floor_to(hi, unit)
    if unit == "month":
        return (hi.year - lo.year) * 12 + hi.month - lo.month + 1
    return int((hi - lo) / _STEPS[unit]) + 1


def _stretches_at(stretches: list[tuple[datetime, datetime]], unit: str) -> list[tuple[datetime, datetime]]:
    """The stretches joined wherever the gap between them leaves fewer than two empty buckets at this unit: there a
    break would take as much room as the empty bars."""
    joined = [stretches[0]]
    for lo, hi in stretches[1:]:
        if _buckets_between(joined[-1][1], lo, unit) - 2 < 2:
            joined[-1] = (joined[-1][0], hi)
        else:
            joined.append((lo, hi))
    return joined


def _slots(stretches: list[tuple[datetime, datetime]], unit: str) -> int:
    return sum(_buckets_between(lo, hi, unit) for lo, hi in stretches) + len(stretches) - 1


def trace_volume_series(*, project: Project) -> VolumeSeries | None:
    """Traces and failures per bucket of trace time, over all of the project's traces with a start time; the bucket
    is the smallest of minute/hour/day/week/month that keeps the chart within MAX_SLOTS bars and breaks. One query
    by day, and one by minute or hour when that is the bucket."""
    traces = Trace.objects.filter(project=project)
    days = list(traces.values(day=Trunc("start_time", "day", tzinfo=dt_timezone.utc)).annotate(
        total=Count("pk"), failures=Count("pk", filter=Q(outcome="failure")),
        successes=Count("pk", filter=Q(outcome="success")), lo=Min("start_time"), hi=Max("start_time"),
    ).order_by("day"))
    undated = sum(r["total"] for r in days if r["day"] is None)
    days = [r for r in days if r["day"] is not None]
    if not days:
        return None
    stretches = [(days[0]["lo"], days[0]["hi"])]
    for row in days[1:]:
        if row["lo"] - stretches[-1][1] >= SKIP_AFTER:
            stretches.append((row["lo"], row["hi"]))
        else:
            stretches[-1] = (stretches[-1][0], row["hi"])
    unit = next((u for u in UNITS if _slots(_stretches_at(stretches, u), u) <= MAX_SLOTS), UNITS[-1])
    if unit in ("minute", "hour"):
        rows = list(traces.filter(start_time__isnull=False)
                    .values(bucket=Trunc("start_time", unit, tzinfo=dt_timezone.utc))
                    .annotate(total=Count("pk"), failures=Count("pk", filter=Q(outcome="failure")),
                              successes=Count("pk", filter=Q(outcome="success"))).order_by("bucket"))
    else:
        rows = [{**r, "bucket": r["day"]} for r in days]
    found: dict[datetime, VolumeBucket] = {}
    for row in rows:
        start = floor_to(row["bucket"], unit)
        bucket = found.setdefault(start, VolumeBucket(start=start))
        bucket.total += row["total"]
        bucket.failures += row["failures"]
        bucket.successes += row["successes"]
    for lo, hi in _stretches_at(stretches, unit):
        moment, end = floor_to(lo, unit), floor_to(hi, unit)
        while moment <= end:
            found.setdefault(moment, VolumeBucket(start=moment))
            moment = step_after(moment, unit)
    series = VolumeSeries(unit=unit, undated=undated)
    for start in sorted(found):
        bucket = found[start]
        if series.buckets and step_after(series.buckets[-1].start, unit) != start:
            bucket.skipped_before = start - step_after(series.buckets[-1].start, unit)
        series.buckets.append(bucket)
    return series
