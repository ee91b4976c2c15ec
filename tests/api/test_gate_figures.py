"""`clearctl gate` does not rewrite the dashboard (issue 17, item 6): an insight's headline figures come from the
latest full run of the newest release (diagnosis/insights/headline.py), and the overview and the insight page say
which run that is. The support desk: v1 with every planted bug, v2 with the misroute fixed; the gate judges v2
first and its baseline v1 last, which used to leave v1's figures on every insight; since issue 27 the runs of a gate
write no insight at all."""

import pytest

from clear.cli import main
from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence
from diagnosis.services import diagnosis_run_start
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db(transaction=True)

V2_BUGS = "mediator_race,retry_loop"


@pytest.fixture
def desk(gate_env, project, desk_rubrics):  # noqa: F811
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs=V2_BUGS, release="v2", seed=1)
    return project


@pytest.fixture
def gate_env(live_server, issued_key, monkeypatch, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    monkeypatch.setenv("CLEAR_URL", live_server.url)
    monkeypatch.setenv("CLEAR_API_KEY", issued_key.secret)
    return live_server


def _gate(capsys) -> None:
    code = main(["gate", "--release", "v2", "--baseline-release", "v1", "--max-new", "99", "--max-worse", "99",
                 "--interval", "0.05"])
    assert code == 0, capsys.readouterr()
    capsys.readouterr()


def _assert_figures_of(run: DiagnosisRun) -> list[Insight]:
    """Every insight that occurred in `run` carries that run's figures; returns them."""
    occurrences = list(InsightOccurrence.objects.filter(run=run).select_related("insight"))
    assert occurrences
    for occurrence in occurrences:
        insight = Insight.objects.get(pk=occurrence.insight_id)
        assert insight.last_run_id == run.pk, (insight.title, insight.last_run.name)
        assert (insight.count, insight.trace_count, insight.frequency) == (
            occurrence.count, occurrence.trace_count, occurrence.frequency), insight.title
    return [o.insight for o in occurrences]


def _figures_line(html: str) -> str:
    start = html.index('data-testid="figures-run"')
    return html[start:html.index("</p>", start)]


def test_a_gate_alone_writes_no_insight(desk, owner, capsys):
    # Issue 27: a gate's runs match their clusters to the stored insights and keep them on the run; they used to
    # fill the Insights list ("Figures from run clearctl gate v1") when no full run had.
    _gate(capsys)
    runs = {r.release: r for r in DiagnosisRun.objects.filter(project=desk)}
    assert set(runs) == {"v1", "v2"} and {r.purpose for r in runs.values()} == {"gate"}
    assert all(r.insights_status == "done" and r.insights_summary["groups"] for r in runs.values())
    assert not Insight.objects.filter(project=desk).exists()
    assert not InsightOccurrence.objects.filter(run__project=desk).exists()

    html = client_for(owner).get(f"/p/{desk.slug}/").content.decode()
    assert 'data-testid="figures-run"' not in html


def test_a_full_run_of_the_newest_release_keeps_the_figures_through_a_gate(desk, owner, issued_key, capsys):
    from rest_framework.test import APIClient

    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    response = api.post("/api/v1/runs/", {"release": "v2", "name": "nightly v2"}, format="json")
    assert response.status_code == 201 and response.json()["purpose"] == "diagnosis"
    full = DiagnosisRun.objects.get(pk=response.json()["id"])
    assert full.insights_status == "done" and full.is_full

    _gate(capsys)  # reuses the full run for v2, judges v1 as a gate run, last
    baseline = DiagnosisRun.objects.get(project=desk, release="v1")
    assert baseline.purpose == "gate" and DiagnosisRun.objects.filter(project=desk).count() == 2
    insights = _assert_figures_of(full)
    assert not InsightOccurrence.objects.filter(run=baseline).exists()
    assert {i.pk for i in insights} & {g["insight_id"] for g in baseline.insights_summary["groups"]}

    # A run over everything, started later, is a full run covering v2 too: the figures move to it; a later gate
    # (reusing both runs) and a sampled run of v2 do not move them again.
    everything = diagnosis_run_start(project=desk, name="everything")
    everything.refresh_from_db()
    assert everything.insights_status == "done"
    _gate(capsys)
    sampled = diagnosis_run_start(project=desk, release="v2", sample_rate=0.5, name="sampled")
    sampled.refresh_from_db()
    assert sampled.insights_status == "done" and not sampled.is_full
    _assert_figures_of(everything)

    client = client_for(owner)
    html = client.get(f"/p/{desk.slug}/").content.decode()
    line = _figures_line(html)
    assert str(everything.pk)[:8] in line and "all releases, full" in line
    assert 'data-testid="latest-other-run"' in html and str(sampled.pk)[:8] in html  # the latest run, named apart
    api_rows = api.get("/api/v1/insights/?page_size=500").json()["results"]
    assert any(row["last_run_id"] == str(everything.pk) for row in api_rows)
    # The sampled run's figures are on nothing, not even on what it found first (issue 27).
    assert not any(str(sampled.pk) in (row["last_run_id"], row["first_run_id"]) for row in api_rows)
