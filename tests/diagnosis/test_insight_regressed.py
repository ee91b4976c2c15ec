"""Regressions flagged (issue 39, item 3; diagnosis/insights/regressed.py): the example agent's v1 with every bug, v2
without the misroute, a full run; then v3 with every bug and no manual run: within two refresh intervals the misroute
is regressed in v3, shows the badge, its ticket is open again and one `insight.regressed` is sent."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from clear.webhooks.models import WebhookDelivery
from clear.webhooks.services import webhook_create
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.services import continuous_tick
from diagnosis.services import insights_refresh as refresh_module
from diagnosis.services.insights_refresh import insights_refresh
from diagnosis.services.insights_review import insight_status_set
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - a fixture
from tests.diagnosis.support import support_desk_ingest
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db


def _tick(capture, at) -> None:
    with capture(execute=True):
        continuous_tick(now=at)


def test_the_misroute_coming_back_in_v3_is_flagged_once(project, settings, desk_rubrics, monkeypatch,  # noqa: F811
                                                        django_capture_on_commit_callbacks, owner, issued_key):
    sent = []
    monkeypatch.setattr(refresh_module, "_send", sent.append)
    settings.CLEAR_TRACE_QUIET_SECONDS = 30
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    settings.CLEAR_TICKET_NOT_ASSOCIATED = True
    interval = settings.CLEAR_INSIGHT_REFRESH_SECONDS = 120
    webhook_create(project=project, url="http://127.0.0.1:9/hook", events=["insight.created", "insight.regressed"])
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    diagnose(project, "")
    misroute = Insight.objects.get(project=project, level="system", is_other=False, title__contains="intent: refund")
    ticket = Ticket.objects.get(insight=misroute)
    insight_status_set(project=project, insight=misroute, status="fixed")  # v2 fixed it
    ticket.refresh_from_db()
    assert ticket.status == "fixed"
    start = timezone.now()
    _tick(django_capture_on_commit_callbacks, start + timedelta(seconds=31))
    run = DiagnosisRun.objects.get(project=project, continuous=True)
    insights_refresh(run_id=run.pk)
    misroute.refresh_from_db()
    assert not misroute.regressed_in_release

    support_desk_ingest(project=project, bugs="all", release="v3", seed=2)
    at = timezone.now()
    for seconds in range(31, 31 + 2 * interval + 1, 15):  # the beat, for two refresh intervals; no manual run
        _tick(django_capture_on_commit_callbacks, at + timedelta(seconds=seconds))
        if DiagnosisRun.objects.get(pk=run.pk).insights_status == "queued":
            insights_refresh(run_id=run.pk)
    misroute.refresh_from_db()
    ticket.refresh_from_db()
    assert misroute.regressed_in_release == "v3" and misroute.status == "open"
    assert ticket.status == "open"
    regressed = WebhookDelivery.objects.filter(event="insight.regressed")
    # One per problem that came back: the misroute's, once. Its nested node insights send none, and its trace-level
    # symptom (the tool_order rubric's "never calls `refund_lookup`", in the same traces) is part of it.
    assert [(d.payload["data"]["insight"]["id"], d.payload["data"]["release"]) for d in regressed] == \
        [(misroute.pk, "v3")], [d.payload["data"]["insight"]["title"] for d in regressed]
    count = regressed.count()

    client = client_for(owner)
    page = client.get(f"/p/{project.slug}/insights/{misroute.pk}/")
    assert page.status_code == 200 and b'data-testid="insight-regressed"' in page.content
    from diagnosis.apis_insight_output import InsightOutputSerializer
    data = InsightOutputSerializer(misroute, context={"shares": None}).data
    assert data["regressed"] is True and data["regressed_in_release"] == "v3"

    # Filtered by release v3, Insights and the API show the misroute's figures in v3, not across releases.
    v3 = next(t for t in misroute.trend if t["release"] == "v3")
    assert v3["judged"] == 22 and 0 < v3["count"] < v3["judged"] and v3["frequency"] != misroute.frequency
    page = client.get(f"/p/{project.slug}/insights/?release=v3").content.decode()
    row = page.split(f'<tr data-insight="{misroute.pk}"', 1)[1].split("</tr>", 1)[0]
    assert f'{v3["count"]} of 22 traces of v3' in row and f'{100 * v3["frequency"]:.0f}%' in row, row
    listed = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").get("/api/v1/insights/?release=v3").json()["results"]
    shown = next(r for r in listed if r["id"] == misroute.pk)
    assert shown["in_release"] == {**v3, "release": "v3"} and shown["regressed_in_release"] == "v3"

    # Another refresh of the same data: no second webhook.
    assert refresh_module.insights_refresh_request(run_id=run.pk, force=True)
    insights_refresh(run_id=run.pk)
    assert regressed.count() == count
