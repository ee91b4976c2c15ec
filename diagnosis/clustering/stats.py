"""Per-insight statistics: frequency, lift with an interval, and trend by release.

All counts are over *judged traces* (traces that at least one judge looked at), at trace level: a trace with
three statements in a cluster counts once.

* frequency = traces with the issue / judged traces, with a Wilson score interval.
* lift = failure rate of judged traces with the issue / failure rate of judged traces without it (a risk
  ratio), over the traces whose outcome is known only (TraceInfo.failed is None when it is not): a failing verdict
  is not an outcome, or every issue would look associated with failure. Interval: Katz's log method,
  exp(ln RR +- z sqrt(1/a - 1/n1 + 1/c - 1/n2)); when a cell is 0, 0.5 is added to a, c and the non-failures
  (Haldane-Anscombe) so the interval stays finite. lift is None when one side has no traces with an outcome, and
  when fewer than MIN_SUCCEEDING judged traces succeeded: a set of failed runs only would give every issue lift 1
  ("not associated") although, with no successes to compare, the association is unknown, not absent.
* risk difference = the same two failure rates subtracted, with Newcombe's hybrid score interval (method 10
  of Newcombe 1998, built from the two Wilson intervals): defined even when a rate is 0 or 1, which the ratio
  is not.
* trend: per release, traces with the issue, judged traces and frequency, in the caller's release order (or
  first-seen order).
* recovered occurrences (diagnosis/judges/recovery.py: the run later reached what a failed call sought): a trace
  whose occurrences of the issue were all recovered counts in the frequency but not, by default, in the lift
  (`lift_traces`): the lift compares the traces where the issue was not recovered with the rest, so an error the
  agent gets past does not look associated with failure because those runs failed later for other reasons. When
  that lift is not associated and the recovered traces are (a retry that went through with wrong arguments), the
  recovered traces' lift is the issue's: they keep it associated. An issue recovered in every trace has the
  recovered traces' lift: associated only when they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

__all__ = [
    "TraceInfo", "IssueStats", "ReleaseCount", "issue_stats", "wilson_interval", "risk_ratio",
    "newcombe_difference", "trend_by_release", "MIN_SUCCEEDING", "issue_lift", "lift_traces",
]

Interval = tuple[float, float]
MIN_SUCCEEDING = 10  # judged traces with a recorded success below which an issue's lift is unknown


@dataclass(frozen=True, slots=True)
class TraceInfo:
    """A judged trace: did it fail (None: its outcome is unknown), and in which release."""

    failed: bool | None
    release: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseCount:
    release: str
    count: int  # judged traces of this release with the issue
    judged: int  # judged traces of this release
    frequency: float  # count / judged (0 when judged is 0)


@dataclass(frozen=True, slots=True)
class IssueStats:
    count: int  # judged traces with the issue
    judged: int
    frequency: float
    frequency_ci: Interval
    failure_rate_with: float | None
    failure_rate_without: float | None
    lift: float | None
    lift_ci: Interval | None
    risk_difference: float | None
    risk_difference_ci: Interval | None
    trend: list[ReleaseCount] = field(default_factory=list)
    recovered: int = 0  # judged traces with the issue whose occurrences were all recovered
    lift_on: str = "all"  # the traces the lift compares: "all", "unrecovered" or "recovered" (lift_traces)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for the proportion k/n; (0, 1) when n is 0."""
    if n <= 0:
        return (0.0, 1.0)
    z = _z(confidence)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half))


def risk_ratio(
    a: int, n1: int, c: int, n2: int, confidence: float = 0.95,
) -> tuple[float | None, Interval | None]:
    """(a/n1) / (c/n2) with Katz's log interval; (None, None) when n1 or n2 is 0."""
    if n1 <= 0 or n2 <= 0:
        return None, None
    if a == 0 or c == 0 or a == n1 or c == n2:  # Haldane-Anscombe correction on every cell
        a_, c_, n1_, n2_ = a + 0.5, c + 0.5, n1 + 1.0, n2 + 1.0
    else:
        a_, c_, n1_, n2_ = float(a), float(c), float(n1), float(n2)
    rr_point = (a / n1) / (c / n2) if c else math.inf
    rr = (a_ / n1_) / (c_ / n2_)
    se = math.sqrt(1 / a_ - 1 / n1_ + 1 / c_ - 1 / n2_)
    z = _z(confidence)
    low, high = rr * math.exp(-z * se), rr * math.exp(z * se)
    point = rr_point if math.isfinite(rr_point) else rr
    return point, (min(low, point), max(high, point))


def issue_lift(
    a: int, n1: int, c: int, n2: int, confidence: float = 0.95, min_succeeding: int = MIN_SUCCEEDING,
) -> tuple[float | None, Interval | None]:
    """An issue's lift: risk_ratio of failing with it (a of n1 traces) against without it (c of n2), and none when
    fewer than `min_succeeding` of those traces succeeded (module docstring)."""
    if (n1 - a) + (n2 - c) < min_succeeding:
        return None, None
    return risk_ratio(a, n1, c, n2, confidence)


def newcombe_difference(
    a: int, n1: int, c: int, n2: int, confidence: float = 0.95,
) -> tuple[float | None, Interval | None]:
    """a/n1 - c/n2 with Newcombe's hybrid score interval; (None, None) when n1 or n2 is 0."""
    if n1 <= 0 or n2 <= 0:
        return None, None
    p1, p2 = a / n1, c / n2
    l1, u1 = wilson_interval(a, n1, confidence)
    l2, u2 = wilson_interval(c, n2, confidence)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return d, (max(-1.0, low), min(1.0, high))


def trend_by_release(
    issue_trace_ids: Iterable[str], traces: Mapping[str, TraceInfo], release_order: Sequence[str] | None = None,
) -> list[ReleaseCount]:
    """Per release: judged traces with the issue, judged traces, frequency. Releases in `release_order`
    (missing ones get zeros) followed by any other release in first-seen order of `traces`."""
    hit = {t for t in issue_trace_ids if t in traces}
    judged: dict[str, int] = {}
    count: dict[str, int] = {}
    for tid, info in traces.items():
        judged[info.release] = judged.get(info.release, 0) + 1
        if tid in hit:
            count[info.release] = count.get(info.release, 0) + 1
    order = list(release_order or [])
    order += [r for r in judged if r not in set(order)]
    return [
        ReleaseCount(release=r, count=count.get(r, 0), judged=judged.get(r, 0),
                     frequency=(count.get(r, 0) / judged[r]) if judged.get(r) else 0.0)
        for r in order
    ]


def _cells(hit: set[str], traces: Mapping[str, TraceInfo]) -> tuple[int, int, int, int]:
    """(a, n1, c, n2): failing and known-outcome traces with the issue, then without it."""
    known = {t for t, info in traces.items() if info.failed is not None}
    n1 = len(hit & known)
    a = sum(1 for t in hit & known if traces[t].failed)
    c = sum(1 for t in known - hit if traces[t].failed)
    return a, n1, c, len(known) - n1


def _associated(hit: set[str], traces: Mapping[str, TraceInfo], confidence: float, min_succeeding: int) -> bool:
    _, interval = issue_lift(*_cells(hit, traces), confidence, min_succeeding)
    return interval is not None and interval[0] > 1


def lift_traces(
    issue_trace_ids: Iterable[str], recovered_trace_ids: Iterable[str], traces: Mapping[str, TraceInfo], *,
    confidence: float = 0.95, min_succeeding: int = MIN_SUCCEEDING,
) -> tuple[set[str], str]:
    """The traces an issue's lift is computed on, and which they are ("all", "unrecovered", "recovered"): the
    traces where it was not recovered, unless only the recovered ones are associated with failure, or there are no
    others (module docstring). recovered_trace_ids: traces whose occurrences of the issue were all recovered."""
    hit = {t for t in issue_trace_ids if t in traces}
    recovered = {t for t in recovered_trace_ids if t in hit}
    if not recovered:
        return hit, "all"
    unrecovered = hit - recovered
    if unrecovered and _associated(unrecovered, traces, confidence, min_succeeding):
        return unrecovered, "unrecovered"
    if not unrecovered or _associated(recovered, traces, confidence, min_succeeding):
        return recovered, "recovered"
    return unrecovered, "unrecovered"


def issue_stats(
    issue_trace_ids: Iterable[str],
    traces: Mapping[str, TraceInfo],
    *,
    confidence: float = 0.95,
    release_order: Sequence[str] | None = None,
    min_succeeding: int = MIN_SUCCEEDING,
    recovered_trace_ids: Iterable[str] = (),
) -> IssueStats:
    """Frequency, lift and trend of one issue. issue_trace_ids: traces in which the issue was found (others
    than the judged `traces` are ignored); traces: every judged trace id -> TraceInfo. No lift when fewer than
    `min_succeeding` judged traces succeeded. recovered_trace_ids: the traces whose occurrences were all recovered:
    counted in the frequency, and in the lift only as `lift_traces` says."""
    hit = {t for t in issue_trace_ids if t in traces}
    recovered = {t for t in recovered_trace_ids if t in hit}
    judged = len(traces)
    compared, lift_on = lift_traces(hit, recovered, traces, confidence=confidence,
                                    min_succeeding=min_succeeding)
    a, n1, c, n2 = _cells(compared, traces)
    lift, lift_ci = issue_lift(a, n1, c, n2, confidence, min_succeeding)
    diff, diff_ci = newcombe_difference(a, n1, c, n2, confidence)
    return IssueStats(
        count=len(hit), judged=judged, frequency=(len(hit) / judged) if judged else 0.0,
        frequency_ci=wilson_interval(len(hit), judged, confidence),
        failure_rate_with=(a / n1) if n1 else None, failure_rate_without=(c / n2) if n2 else None,
        lift=lift, lift_ci=lift_ci, risk_difference=diff, risk_difference_ci=diff_ci,
        trend=trend_by_release(hit, traces, release_order),
        recovered=len(recovered), lift_on=lift_on,
    )
