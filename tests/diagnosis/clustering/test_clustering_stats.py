import math

import pytest

from diagnosis.clustering.stats import (
    TraceInfo, issue_stats, newcombe_difference, risk_ratio, trend_by_release, wilson_interval,
)


def test_wilson_interval_known_values():
    low, high = wilson_interval(81, 263)  # Newcombe (1998) example: 0.2553 to 0.3662
    assert low == pytest.approx(0.2553, abs=1e-4) and high == pytest.approx(0.3662, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 10)[0] == 0.0


def test_newcombe_difference_known_values():
    # Newcombe (1998) table II example (56/70 vs 48/80): difference 0.2, hybrid score CI 0.0524 to 0.3339
    d, (low, high) = newcombe_difference(56, 70, 48, 80)
    assert d == pytest.approx(0.2)
    assert low == pytest.approx(0.0524, abs=1e-3) and high == pytest.approx(0.3339, abs=1e-3)


def test_risk_ratio_katz_interval():
    rr, (low, high) = risk_ratio(30, 50, 20, 100)  # 0.6 / 0.2 = 3
    assert rr == pytest.approx(3.0)
    se = math.sqrt(1 / 30 - 1 / 50 + 1 / 20 - 1 / 100)
    assert low == pytest.approx(3 * math.exp(-1.959964 * se), rel=1e-4)
    assert high == pytest.approx(3 * math.exp(1.959964 * se), rel=1e-4)
    rr0, ci0 = risk_ratio(5, 5, 0, 20)  # no failure without the issue: finite, corrected
    assert math.isfinite(rr0) and ci0[0] > 1 and math.isfinite(ci0[1])
    assert risk_ratio(1, 0, 1, 3) == (None, None)


def test_issue_stats_and_trend():
    traces = {}
    for i in range(40):
        traces[f"t{i}"] = TraceInfo(failed=(i < 10 or 20 <= i < 24), release="r1" if i < 20 else "r2")
    issue = [f"t{i}" for i in range(10)] + ["t20", "t25", "unjudged"]
    s = issue_stats(issue, traces, release_order=["r0", "r1", "r2"])
    assert s.count == 12 and s.judged == 40 and s.frequency == pytest.approx(0.3)
    assert s.failure_rate_with == pytest.approx(11 / 12)
    assert s.failure_rate_without == pytest.approx(3 / 28)
    assert s.lift == pytest.approx((11 / 12) / (3 / 28))
    assert s.lift_ci[0] < s.lift < s.lift_ci[1] and s.lift_ci[0] > 1
    assert s.risk_difference_ci[0] > 0
    assert [(r.release, r.count, r.judged) for r in s.trend] == [("r0", 0, 0), ("r1", 10, 20), ("r2", 2, 20)]
    assert s.trend[1].frequency == pytest.approx(0.5)
    assert trend_by_release([], {})[:1] == []


def test_issue_everywhere_has_no_lift():
    traces = {f"t{i}": TraceInfo(failed=i % 2 == 0) for i in range(6)}
    s = issue_stats(traces.keys(), traces)
    assert s.frequency == 1.0 and s.lift is None and s.lift_ci is None and s.failure_rate_without is None
