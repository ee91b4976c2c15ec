"""Retention (issue 30, item 3, on the plain span table): CLEAR_RETENTION_DAYS with a per-project override in
Settings, a dry run, and expiry that is not a user's deletion: runs', insights' and tickets' figures stay as they were
measured, and links to an expired trace say it expired (410) instead of "no such trace"."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from clear.projects.models import AuditEvent
from diagnosis.models import InsightOccurrence
from tests.api.conftest import counted_insight, make_trace
from tests.frontend.conftest import client_for
from traces.models import ExpiredTrace, Trace
from traces.services.lifecycle import traces_retention_enforce

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def _old(project, days: int):
    trace = make_trace(project, start=timezone.now() - timedelta(days=days))
    Trace.objects.filter(pk=trace.pk).update(first_received_at=timezone.now() - timedelta(days=days))
    return trace


def test_the_server_default_applies_unless_the_project_sets_its_own_and_a_dry_run_deletes_nothing(
        project, outsider_project, settings):
    settings.CLEAR_RETENTION_DAYS = 30
    old, kept = _old(project, 40), _old(project, 10)
    elsewhere = _old(outsider_project, 40)
    outsider_project.retention_days = 0  # forever for that project, whatever the server says
    outsider_project.save()
    assert traces_retention_enforce(dry_run=True) == [{"project": project.slug, "days": 30, "traces": 1}]
    assert Trace.objects.count() == 3

    out = StringIO()
    call_command("enforce_retention", "--dry-run", stdout=out)
    assert out.getvalue().strip() == f"{project.slug}: keeps 30 days; would delete 1 trace(s)"
    call_command("enforce_retention", "--project", project.name, stdout=StringIO())
    assert set(Trace.objects.values_list("pk", flat=True)) == {kept.pk, elsewhere.pk}
    expired = ExpiredTrace.objects.get(project=project)
    assert (expired.trace_id, expired.retention_days) == (old.trace_id, 30)

    settings.CLEAR_RETENTION_DAYS = None  # an upgrade with nothing set deletes nothing
    project.retention_days = None
    project.save()
    assert traces_retention_enforce() == []


def test_expiry_keeps_the_figures_measured_on_the_traces_and_says_the_trace_expired(client, project, owner):
    traces = [_old(project, 40) for _ in range(2)] + [make_trace(project)]
    run, insight = counted_insight(project, traces)
    project.retention_days = 30
    project.save()

    assert traces_retention_enforce() == [{"project": project.slug, "days": 30, "traces": 2}]
    run.refresh_from_db()
    insight.refresh_from_db()
    occurrence = InsightOccurrence.objects.get(insight=insight, run=run)
    assert (run.total_count, run.done_count) == (3, 3)  # a user's deletion would make them (1, 1)
    assert (insight.count, insight.trace_count, insight.frequency) == (2, 2, pytest.approx(2 / 3))
    assert (occurrence.count, occurrence.judged) == (2, 3)

    gone = traces[0].trace_id
    response = client.get(f"/api/v1/traces/{gone}/")
    assert response.status_code == 410 and response.json()["code"] == "trace_expired"
    assert "30-day retention" in response.json()["message"]
    assert client.get(f"/api/v1/traces/{'f' * 32}/").status_code == 404  # never existed: still 404
    page = client_for(owner).get(f"/p/{project.slug}/traces/{gone}/")
    assert page.status_code == 410 and "Trace expired" in page.content.decode()
    assert "30-day retention" in page.content.decode()


def test_owners_set_the_retention_in_settings_and_members_see_it(project, owner, teammate):
    url = f"/p/{project.slug}/settings/retention/"
    _old(project, 100)
    page = client_for(owner).get(url).content.decode()
    assert 'data-testid="retention-form"' in page and "removes nothing" in page
    assert 'data-testid="retention-disk"' in page and "2 spans, 100% of the" in page  # the only project with spans

    response = client_for(owner).post(url, {"days": "60"})
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.retention_days == 60
    event = AuditEvent.objects.get(project=project, kind=AuditEvent.Kind.RETENTION_CHANGED)
    assert event.detail == {"from": None, "to": 60} and event.user == owner
    page = client_for(owner).get(url).content.decode()
    assert "would remove 1 trace older than 60 days" in page

    assert client_for(owner).post(url, {"days": "-3"}).status_code == 200  # the form says what to fix
    project.refresh_from_db()
    assert project.retention_days == 60
    assert client_for(teammate).post(url, {"days": "1"}).status_code == 403
    member_page = client_for(teammate).get(url).content.decode()
    assert 'data-testid="retention-owners-only"' in member_page and "60 days" in member_page
    assert client_for(owner).post(url, {"days": ""}).status_code == 302
    project.refresh_from_db()
    assert project.retention_days is None


def test_disk_use_is_the_projects_share_of_the_spans(project, outsider_project):
    from traces.selectors.retention import project_disk_use

    make_trace(project, spans=3)
    make_trace(outsider_project, spans=1)
    use = project_disk_use(project=project)
    assert (use["spans"], use["share"]) == (3, 0.75)
    assert use["total_bytes"] > 0 and use["bytes"] == int(use["total_bytes"] * 0.75)
