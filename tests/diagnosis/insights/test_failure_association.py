"""Failure association: lift over traces with a recorded outcome only. A planted bug's insight is associated with
failure; a pattern as frequent in succeeding traces as in failing ones is not, and is ranked below; without any
recorded outcome there is no lift and the pages say "association unknown"."""

from __future__ import annotations

import pytest

from diagnosis.clustering import TraceInfo, issue_stats
from diagnosis.models import Insight
from diagnosis.selectors import insight_list
from tests.diagnosis.insights.conftest import BUG_NODE, TOUCHED_BY, diagnose, insight_for_tasks
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for
from traces.models import Trace

pytestmark = pytest.mark.django_db


def test_lift_counts_known_outcomes_only():
    traces = {f"f{i}": TraceInfo(failed=True) for i in range(10)}
    traces |= {f"s{i}": TraceInfo(failed=False) for i in range(10)}
    traces |= {f"u{i}": TraceInfo(failed=None) for i in range(30)}
    everywhere = [*traces]  # in failures, successes and unknowns alike
    stats = issue_stats(everywhere, traces)
    assert stats.frequency == 1.0 and stats.lift is None  # nothing to compare with among the known
    half = [f"f{i}" for i in range(8)] + ["s0", *(f"u{i}" for i in range(30))]
    stats = issue_stats(half, traces)
    assert stats.count == 39 and stats.failure_rate_with == pytest.approx(8 / 9)
    assert stats.failure_rate_without == pytest.approx(2 / 11) and stats.lift_ci[0] > 1
    assert issue_stats(half, {t: TraceInfo(failed=None) for t in traces}).lift is None


def test_planted_bugs_are_associated_and_a_pattern_in_successes_too_is_not(project, owner, desk_rubrics):
    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnose(project, "r1")
    for bug, tasks in TOUCHED_BY.items():
        insight = insight_for_tasks(project, BUG_NODE[bug], tasks, run)
        assert insight.failure_association == "associated", (bug, insight.lift_low)
    # A pattern made to show in succeeding traces as often as in failing ones: its interval includes 1.
    insight = insight_for_tasks(project, BUG_NODE["retry_loop"], TOUCHED_BY["retry_loop"], run)
    insight.lift, insight.lift_low, insight.lift_high = 1.0, 0.6, 1.7
    insight.save()
    assert insight.failure_association == "not_associated" and not insight.failure_inconclusive
    listed = list(insight_list(project=project, include_other=False))
    assert listed.index(insight) > max(listed.index(i) for i in listed if i.failure_association != "not_associated")
    html = client_for(owner).get(f"/p/{project.slug}/insights/").content.decode()
    assert "not associated with failure" in html
    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert "not associated with failure" in page
    # Failing traces show it more often, but too few for the interval to clear 1: the pages say so (a candidate).
    insight.lift, insight.lift_low, insight.lift_high = 1.6, 0.9, 2.5
    insight.save()
    assert insight.failure_association == "not_associated" and insight.failure_inconclusive
    html = client_for(owner).get(f"/p/{project.slug}/insights/").content.decode()
    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert 'data-association="inconclusive"' in html and "too few runs to tell" in page


def test_without_outcomes_there_is_no_lift_and_the_pages_say_so(project, owner, desk_rubrics):
    support_desk_ingest(project=project, bugs="all", release="r1")
    Trace.objects.filter(project=project).update(outcome=None)
    diagnose(project, "r1")
    insights = Insight.objects.filter(project=project, is_other=False)
    assert insights.exists() and all(i.lift is None and i.failure_association == "unknown" for i in insights)
    html = client_for(owner).get(f"/p/{project.slug}/insights/").content.decode()
    assert "association unknown" in html and "×" not in html.split("<tbody>", 1)[1]
