"""Regressions (issue 39, item 3): a problem absent from (or fixed in) the previous release that shows again in a newer
one is flagged `regressed` in that release, its ticket reopened and `insight.regressed` sent, once.

Read from the insight's trend by release (trend.py, recomputed after every build and refresh): the newest release
judged on at least CLEAR_INSIGHT_REGRESSION_MIN_TRACES traces against the release before it in the trend. It is
regressed there when its frequency rose by CLEAR_INSIGHT_REGRESSION_DELTA or more and it was absent from that
previous release (no trace had it) or was marked fixed. The flag is claimed with a conditional update, so of two
refreshes, or a refresh and a redelivered one, exactly one reopens and sends; a later release that does not show it
again clears the flag.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from diagnosis.models import Insight


def min_traces() -> int:
    return int(getattr(settings, "CLEAR_INSIGHT_REGRESSION_MIN_TRACES", 10))


def insight_regressed_release(*, insight: Insight) -> str:
    """The release the insight came back in by its trend, "" when none."""
    trend = [t for t in (insight.trend or []) if t.get("judged")]
    newest = next((i for i in range(len(trend) - 1, 0, -1) if int(trend[i]["judged"]) >= min_traces()), None)
    if newest is None:
        return ""
    now, before = trend[newest], trend[newest - 1]
    rose = float(now["frequency"]) - float(before["frequency"]) >= float(settings.CLEAR_INSIGHT_REGRESSION_DELTA)
    absent = int(before.get("count") or 0) == 0 or insight.status == Insight.Status.FIXED
    return str(now["release"]) if rose and absent and int(now.get("count") or 0) > 0 else ""


def insights_regressed_mark(*, project_id: int) -> list[int]:
    """Flag the project's insights that came back (module docstring); returns the ids flagged by this call, whose
    tickets the caller reopens and whose webhook it sends."""
    flagged = []
    insights = Insight.objects.filter(project_id=project_id, is_other=False, merged_into__isnull=True) \
        .exclude(review=Insight.Review.REJECTED).exclude(status=Insight.Status.IGNORED).only(
            "pk", "trend", "status", "regressed_in_release", "reopen_count")
    for insight in insights:
        release = insight_regressed_release(insight=insight)
        if release == insight.regressed_in_release:
            continue
        if not release:
            newest = next((t["release"] for t in reversed(insight.trend or [])
                           if int(t.get("judged") or 0) >= min_traces()), "")
            if newest != insight.regressed_in_release:  # a newer release that does not show it again
                Insight.objects.filter(pk=insight.pk, regressed_in_release=insight.regressed_in_release).update(
                    regressed_in_release="", regressed_at=None)
            continue
        # the claim: one caller wins per insight and release
        if Insight.objects.filter(pk=insight.pk, regressed_in_release=insight.regressed_in_release).exclude(
                regressed_in_release=release).update(regressed_in_release=release, regressed_at=timezone.now(),
                                                     status=Insight.Status.OPEN):
            if insight.status == Insight.Status.FIXED:
                Insight.objects.filter(pk=insight.pk).update(reopened_at=timezone.now(),
                                                             reopen_count=insight.reopen_count + 1)
            flagged.append(insight.pk)
    return flagged
