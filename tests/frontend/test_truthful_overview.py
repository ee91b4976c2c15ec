"""What the overview says is true (issue 26, items 2, 4 and 5): the failing figure counts traces by each judge's
latest verdict, so re-runs do not inflate it; Top insights leaves out patterns not associated with failure; the
volume chart counts every trace with a bucket size fitting the data, and the pages say which clock a time is on."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis import selectors
from diagnosis.models import Feedback, Insight
from diagnosis.selectors import feedback_failing_list
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from diagnosis.services.insights import insights_build
from tests.frontend.conftest import client_for
from traces.models import Trace
from traces.selectors import trace_volume_series

pytestmark = pytest.mark.django_db


def _failing_traces_shown(html: str) -> int:
    # Either wording (the old one summed every run's failing verdicts), so the number is what is compared.
    match = re.search(r"[>\s]([\d,]+) (?:traces? with a failing verdict<|failing verdicts? in all runs)", html)
    assert match, "the overview gives the failing figure"
    return int(match.group(1).replace(",", ""))


# ---- (2) failing traces, not failing verdicts summed over runs ------------------------------------------------------


def test_failing_traces_are_the_named_runs_own(seeded, owner):
    """The figure sits beside the run it names ("Figures from run …"), so it is that run's, as its run page counts it
    (issue 40: the overview said 32 for a run that had 20, counting every run's latest verdicts); re-running the
    same traces does not add up either."""
    project, client = seeded.project, client_for(owner)
    url = f"/p/{project.slug}/"

    def shown_and_run() -> tuple[int, int]:
        response = client.get(url)
        run = response.context["figures_run"] or response.context["latest_run"]
        page = client.get(f"/p/{project.slug}/runs/{run.pk}/").context["summary"].failing_traces
        return _failing_traces_shown(response.content.decode()), page

    traces = set(feedback_failing_list(project=project).values_list("trace_id", flat=True))
    assert traces, "the seed run fails some traces"
    assert shown_and_run() == (len(traces), len(traces))

    rerun = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="r1", enqueue=False,
                                                          name="again", judges=["rules"]))
    assert insights_build(run=rerun) is not None
    assert feedback_failing_list(project=project).count() > len(traces)  # the verdicts did add up
    shown, on_run_page = shown_and_run()
    assert shown == on_run_page and 0 < shown <= len(traces)


# ---- (4) Top insights --------------------------------------------------------------------------------------------


def test_top_insights_leave_out_insights_not_associated_with_failure(seeded, owner):
    assert insights_build(run=seeded.run) is not None
    project = seeded.project
    insights = list(Insight.objects.filter(project=project, status=Insight.Status.OPEN, is_other=False,
                                           merged_into__isnull=True).order_by("-frequency", "pk"))
    assert len(insights) >= 3
    unknown, associated, *others = insights
    Insight.objects.filter(pk=unknown.pk).update(lift=None, lift_low=None, lift_high=None)
    Insight.objects.filter(pk=associated.pk).update(lift=3.0, lift_low=1.5, lift_high=6.0)
    Insight.objects.filter(pk__in=[i.pk for i in others]).update(lift=1.1, lift_low=0.6, lift_high=1.9)

    response = client_for(owner).get(f"/p/{project.slug}/")
    listed = {i.pk for i in response.context["top_insights"]}
    assert listed and listed <= {unknown.pk, associated.pk}
    html = response.content.decode()
    section = html[html.index('data-testid="top-insights"'):]
    section = section[:section.index("</section>")]
    for other in others:
        assert f"/insights/{other.pk}/" not in section, other.title


# ---- (5) the chart counts every trace; every time says its clock ---------------------------------------------------


def _traces(project, starts, outcomes=("failure", "success"), start: int = 0) -> None:
    Trace.objects.bulk_create([
        Trace(project=project, trace_id=f"{index:032x}", name="agent", start_time=moment,
              outcome=outcomes[index % len(outcomes)], span_count=1)
        for index, moment in enumerate(starts, start=start)])


def test_a_trace_from_today_beside_old_traces_keeps_every_trace_and_the_bucket(project, owner):
    now = timezone.now()
    old = now - timedelta(days=125)  # four months ago: 44 traces of a suite, each in its own two-minute slot
    _traces(project, [old + timedelta(minutes=2 * i) for i in range(44)])
    alone = trace_volume_series(project=project)
    assert alone.unit == "minute" and sum(b.total for b in alone.buckets) == 44
    _traces(project, [now], start=44)

    series = trace_volume_series(project=project)
    assert sum(b.total for b in series.buckets) == Trace.objects.filter(project=project).count() == 45
    assert sum(b.failures for b in series.buckets) == Trace.objects.filter(project=project, outcome="failure").count()
    assert series.unit == alone.unit  # not "week"
    assert series.skips == 1 and series.buckets[-1].skipped_before > timedelta(days=100)
    assert [b.start for b in series.buckets[:-1]] == [b.start for b in alone.buckets]

    html = client_for(owner).get(f"/p/{project.slug}/").content.decode()
    assert "per minute of trace time" in html and 'data-testid="axis-break"' in html


def test_contiguous_traces_get_a_plain_axis(project):
    start = timezone.now() - timedelta(days=3)
    _traces(project, [start + timedelta(hours=i) for i in range(60)])
    Trace.objects.create(project=project, trace_id="f" * 32, name="no start time")
    series = trace_volume_series(project=project)
    assert series.unit == "hour" and series.skips == 0
    assert sum(b.total for b in series.buckets) == 60 and len(series.buckets) == 60
    assert series.undated == 1  # told apart on the page, since it has no place on a time axis


def test_times_on_the_overview_and_traces_pages_say_which_clock(seeded, owner):
    project, client = seeded.project, client_for(owner)
    overview = client.get(f"/p/{project.slug}/").content.decode()
    assert "figures as of" in overview and "(arrival time: traces received by then)" in overview
    assert "Started (trace time, UTC)" in overview and "of trace time" in overview
    listing = client.get(f"/p/{project.slug}/traces/").content.decode()
    assert "Started (trace time, UTC)" in listing and 'title="arrived ' in listing
    trace = Trace.objects.filter(project=project).first()
    page = client.get(f"/p/{project.slug}/traces/{trace.trace_id}/").content.decode()
    assert "Started (trace time, UTC)" in page and "Arrived (UTC)" in page
