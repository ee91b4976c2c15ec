"""After a run's insights are built, its failed traces get their learned attribution (the outbox's insights.built),
so the insight page and the ticket list show who was blamed without a command."""

from __future__ import annotations

import pytest

from clear.outbox.services import outbox_subscribers
from diagnosis.attribution.models import Attribution
from diagnosis.attribution.selectors import attribution_summary_for_insight
from diagnosis.attribution.subscribers import attribution_after_build
from diagnosis.models import Insight
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - the insights tests' fixture
from tests.diagnosis.support import support_desk_ingest
from traces.models import Trace

pytestmark = pytest.mark.django_db


def test_insights_built_attributes_the_runs_failed_traces_once(project, desk_rubrics):  # noqa: F811
    assert "attribution.after_build" in {task.name for task in outbox_subscribers(topic="insights.built")}
    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnose(project, "r1")
    Attribution.objects.filter(project=project).delete()  # whatever the build's dispatch did: start from none
    attribution_after_build([{"data": {"project": str(project.pk), "run": str(run.pk)}}])
    failed = Trace.objects.filter(project=project, outcome="failure").count()
    attributions = Attribution.objects.filter(project=project, method="learned")
    assert failed and attributions.count() == failed
    # confident (ok, naming the agent) or not (inconclusive, naming none but its candidates); a confidence either way
    assert all((a.status == "ok") == a.details["confident"] == bool(a.agent) and 0 <= a.confidence <= 1
               and a.details["candidates"] for a in attributions)
    updated = set(attributions.values_list("pk", "updated_at"))
    attribution_after_build([{"data": {"project": str(project.pk), "run": str(run.pk)}}])  # redelivered
    assert set(Attribution.objects.filter(project=project).values_list("pk", "updated_at")) == updated

    insight = Insight.objects.filter(project=project, is_other=False).order_by("-count").first()
    summary = attribution_summary_for_insight(project=project, insight=insight)
    assert summary["attributed"] and (summary["agents"] or summary["candidates"]), summary
