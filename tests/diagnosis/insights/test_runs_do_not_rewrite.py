"""Runs that are not full never touch the main list, and stale entries retire (issue 27, items 2 and 3).

The support desk: v1 with every planted bug, v2 with the misroute fixed. A full run of v1 builds the list; then
`clearctl gate --release v2 --baseline-release v1`, a sampled and a filtered run leave the Insights list, the
overview's top insights, every insight's figures and the tickets as they were, while a full run over everything
changes them. An "Other feedback" entry whose one trace a later full run gave to a named insight leaves the open list,
merged into that insight with the reason "absorbed"."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clear.cli import main
from diagnosis.models import (DiagnosisRun, Feedback, Insight, InsightEvent, InsightOccurrence, InsightStatement,
                              RunTrace)
from diagnosis.selectors import insight_list
from diagnosis.selectors.insights import insight_list_top
from diagnosis.services import diagnosis_run_start
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for
from traces.models import Trace

FIGURES = ("title", "count", "trace_count", "frequency", "lift", "status", "merged_into_id", "last_run_id", "severity")
TICKET_FIGURES = ("insight_id", "status", "title", "frequency", "trace_count", "lift", "statement_count",
                  "judged_count", "releases", "merged_into_id")


def _section(html: str, testid: str, end: str) -> str:
    start = html.index(f'data-testid="{testid}"')
    return html[start:html.index(end, start)]


def _overview(client, project) -> tuple[str, str]:
    """The overview's top insights and the run its figures come from ("Figures from run …")."""
    html = client.get(f"/p/{project.slug}/").content.decode()
    return _section(html, "top-insights", "</section>"), _section(html, "figures-run", "</a>")


def _state(project) -> dict:
    """What a person sees of the main list: its order, the overview's top, each insight's figures, the tickets."""
    return {
        "list": [i.pk for i in insight_list(project=project)],
        "top": [i.pk for i in insight_list_top(project=project)],
        "figures": {i["id"]: i for i in Insight.objects.filter(project=project).values("id", *FIGURES)},
        "tickets": list(Ticket.objects.filter(project=project).order_by("pk").values("pk", *TICKET_FIGURES)),
        "occurrences": sorted(InsightOccurrence.objects.filter(insight__project=project)
                              .values_list("insight_id", "run_id", "trace_count")),
        "events": InsightEvent.objects.filter(insight__project=project).count(),
    }


@pytest.mark.django_db(transaction=True)
def test_gate_sampled_and_filtered_runs_leave_the_list_a_full_run_changes_it(
        live_server, issued_key, monkeypatch, settings, project, owner, desk_rubrics, capsys):  # noqa: F811
    from rest_framework.test import APIClient

    settings.CLEAR_JUDGE_MODEL = ""
    monkeypatch.setenv("CLEAR_URL", live_server.url)
    monkeypatch.setenv("CLEAR_API_KEY", issued_key.secret)
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    response = api.post("/api/v1/runs/", {"release": "v1", "name": "nightly v1"}, format="json")
    full = DiagnosisRun.objects.get(pk=response.json()["id"])
    assert full.insights_status == "done" and full.is_full
    before = _state(project)
    assert before["list"] and before["top"] and before["tickets"]
    client = client_for(owner)
    overview = _overview(client, project)
    assert "nightly v1" in overview[1]

    code = main(["gate", "--release", "v2", "--baseline-release", "v1", "--max-new", "99", "--max-worse", "99",
                 "--interval", "0.05"])
    out = capsys.readouterr().out
    assert code == 0, out
    gate = DiagnosisRun.objects.get(project=project, release="v2")
    assert gate.purpose == "gate" and gate.insights_status == "done"
    assert "resolved" in out and "PASSED" in out
    assert _state(project) == before
    assert _overview(client, project) == overview
    # The gate's comparison saw v1's misroute gone in v2: matched to stored insights, nothing written.
    body = api.get(f"/api/v1/compare/?base_release=v1&head_run={gate.pk}").json()
    assert body["counts"]["resolved"] >= 1 and all(row["id"] for row in body["resolved"])
    assert any(g["insight_id"] for g in gate.insights_summary["groups"])

    sampled = diagnosis_run_start(project=project, release="v1", sample_rate=0.5, name="sampled")
    sampled.refresh_from_db()
    assert sampled.insights_status == "done" and sampled.insights_summary["statements"] > 0
    assert _state(project) == before and _overview(client, project) == overview
    filtered = diagnosis_run_start(project=project, since=timezone.now() - timedelta(days=3650), name="filtered")
    filtered.refresh_from_db()
    assert filtered.scope_label == "all releases, filtered" and filtered.insights_status == "done"
    assert filtered.insights_summary["statements"] > 0
    assert _state(project) == before and _overview(client, project) == overview

    everything = diagnosis_run_start(project=project, name="everything")
    everything.refresh_from_db()
    assert everything.is_full and everything.insights_status == "done"
    after = _state(project)
    assert after["figures"] != before["figures"] and after["occurrences"] != before["occurrences"]
    assert {f["last_run_id"] for f in after["figures"].values()} >= {everything.pk}
    assert "everything" in _overview(client, project)[1]


@pytest.mark.django_db
def test_an_absorbed_other_feedback_entry_leaves_the_open_list(project):
    from diagnosis.insights.absorbed import insights_absorbed_retire

    first = DiagnosisRun.objects.create(project=project, name="first", status="succeeded", insights_status="done")
    second = DiagnosisRun.objects.create(project=project, name="second", status="succeeded", insights_status="done")
    weather, kept = (Trace.objects.create(project=project, trace_id=f"{i:032x}") for i in (1, 2))
    RunTrace.objects.bulk_create([RunTrace(run=run, trace=t, status="done") for run in (first, second)
                                  for t in (weather, kept)])

    def statement(run, trace, node, insight, judge="rubric.weather"):
        feedback, _ = Feedback.objects.get_or_create(run=run, project=project, trace=trace, judge=judge,
                                                     target_span_id="0" * 16,
                                                     defaults={"judge_kind": "rule", "verdict": "fail"})
        field = "node_insight" if node else "system_insight"
        InsightStatement.objects.create(project=project, run=run, feedback=feedback, trace=trace, kind="issue",
                                        text=f"{node} misreads the forecast", node=node, judge=judge,
                                        **{field: insight})
        InsightOccurrence.objects.get_or_create(insight=insight, run=run, defaults={"trace_count": 1, "count": 1})

    other = Insight.objects.create(project=project, level="node", node="weather_worker", is_other=True,
                                   title="Other feedback at weather_worker", trace_count=1, count=1, frequency=0.5)
    other_system = Insight.objects.create(project=project, level="system", is_other=True, trace_count=1, count=1,
                                          title="Other system-level feedback", frequency=0.5)
    statement(first, weather, "weather_worker", other)
    statement(first, kept, "", other_system, judge="llm.trace")  # its trace has nothing in the second run
    named = Insight.objects.create(project=project, level="node", node="weather_worker", trace_count=1, count=1,
                                   title="The weather worker reads Celsius as Fahrenheit", frequency=0.5)
    statement(second, weather, "weather_worker", named)
    open_before = {i.pk for i in insight_list(project=project, status="open")}
    assert {other.pk, other_system.pk, named.pk} <= open_before

    assert insights_absorbed_retire(run=second) == [other.pk]
    other.refresh_from_db()
    assert other.merged_into_id == named.pk
    event = InsightEvent.objects.get(insight=other, kind="merged")
    assert event.data["reason"] == "absorbed" and event.data["into"] == named.pk
    open_after = {i.pk for i in insight_list(project=project, status="open")}
    assert open_after == open_before - {other.pk}
    assert Insight.objects.get(pk=other_system.pk).merged_into_id is None
