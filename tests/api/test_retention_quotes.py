"""Evidence quotes after retention expiry: CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES off (the default), the text quoted
from an expired trace goes from the insight (page and API), its ticket (API, body, exports) and the judge cache; on,
it stays. Either way the figures stay as they were measured and the citation says its trace expired, when and under
which retention, instead of linking to a trace that answers 410."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from diagnosis.models import Feedback, InsightEvidence, InsightStatement, JudgeCacheEntry
from diagnosis.tickets.models import Ticket
from diagnosis.tickets.services import ticket_sync_from_insight
from tests.api.conftest import counted_insight, make_trace
from tests.frontend.conftest import client_for
from traces.models import ExpiredTrace, Trace
from traces.services.lifecycle import traces_retention_enforce

pytestmark = pytest.mark.django_db

SECRET = "card 4111-1111-1111-1111 of customer Ada"  # what a span said: must not outlive the trace unless kept
LIVE = "the lookup returned nothing"


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def _old(project, days: int) -> Trace:
    trace = make_trace(project, start=timezone.now() - timedelta(days=days), outcome="failure", task_id="task-7")
    Trace.objects.filter(pk=trace.pk).update(first_received_at=timezone.now() - timedelta(days=days))
    return trace


def _setup(project):
    """Two expired traces whose citations quote SECRET (one judged by a cached LLM call), a live one quoting LIVE,
    and the insight's ticket made from that evidence."""
    traces = [_old(project, 40) for _ in range(2)] + [make_trace(project)]
    run, insight = counted_insight(project, traces)
    InsightEvidence.objects.filter(insight=insight).update(quote=SECRET)
    live_feedback = Feedback.objects.create(run=run, project=project, trace=traces[2], judge="llm.step",
                                            judge_kind="llm", verdict=Feedback.Verdict.FAIL, target_span_id="a" * 16)
    statement = InsightStatement.objects.create(project=project, run=run, feedback=live_feedback, trace=traces[2],
                                                kind="issue", text="skipped the lookup", node="planner",
                                                judge="llm.step", node_insight=insight)
    InsightEvidence.objects.create(insight=insight, run=run, trace=traces[2], span_id="a" * 16,
                                   feedback=live_feedback, statement=statement, statement_text=statement.text,
                                   quote=LIVE)
    Feedback.objects.filter(trace=traces[0]).update(cache_key="k" * 64)
    JudgeCacheEntry.objects.create(key="k" * 64, result={"content": f'{{"evidence": [{{"quote": "{SECRET}"}}]}}'})
    insight.fingerprint = "f" * 16
    insight.save()
    ticket = ticket_sync_from_insight(insight=insight)
    assert ticket is not None and SECRET in ticket.body and len(ticket.evidence) == 3
    project.retention_days = 30
    project.save()
    return traces, insight, ticket


def _expire(project, insight, ticket):
    before = (insight.count, insight.trace_count, insight.frequency, ticket.frequency, ticket.trace_count,
              ticket.statement_count)
    assert traces_retention_enforce() == [{"project": project.slug, "days": 30, "traces": 2}]
    insight.refresh_from_db()
    ticket.refresh_from_db()
    assert (insight.count, insight.trace_count, insight.frequency, ticket.frequency, ticket.trace_count,
            ticket.statement_count) == before  # frozen, whichever way the quotes go
    return ExpiredTrace.objects.filter(project=project).first().expired_at.strftime("%Y-%m-%d")


def _says_expired(html: str, gone: list[str], day: str, project) -> None:
    assert html.count('data-testid="evidence-expired"') == 2
    assert f"trace expired on {day}, retention 30 days" in html
    for trace_id in gone:  # no link to a trace that would answer 410
        assert f"/p/{project.slug}/traces/{trace_id}/" not in html


def test_quotes_of_expired_traces_go_by_default_and_the_figures_stay(client, project, owner, settings):
    settings.CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES = False
    traces, insight, ticket = _setup(project)
    day = _expire(project, insight, ticket)
    gone = [t.trace_id for t in traces[:2]]

    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert SECRET not in page and LIVE in page
    _says_expired(page, gone, day, project)
    assert page.count("quote removed: its trace expired") == 2

    body = client.get(f"/api/v1/insights/{insight.pk}/evidence/").json()
    assert [e["quote"] for e in body["results"]] == [LIVE]
    assert sorted(e["trace_id"] for e in body["expired"]) == sorted(gone)
    assert {(e["quote"], e["quote_removed"], e["retention_days"]) for e in body["expired"]} == {("", True, 30)}
    assert all(e["expired_at"].startswith(day) for e in body["expired"])

    detail = client.get(f"/api/v1/tickets/{ticket.pk}/").json()
    assert SECRET not in str(detail) and LIVE in detail["body"]
    expired = [e for e in detail["evidence"] if e["trace_id"] in gone]
    assert len(expired) == 2 and all(e["quote"] == "" and e["quote_removed"] for e in expired)
    assert detail["body"].count("Quote removed: its trace expired") == 2
    assert f"trace expired on {day}, retention 30 days" in detail["body"]
    for output in ("md", "csv", "json"):
        assert SECRET not in client.get(f"/api/v1/tickets/export/?output={output}").content.decode()
    assert not JudgeCacheEntry.objects.filter(key="k" * 64).exists()

    # A later sync makes the ticket from the insight again: the frozen citations stay, still without the quote.
    ticket_sync_from_insight(insight=insight)
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert SECRET not in ticket.body and len(ticket.evidence) == 3
    assert f"trace expired on {day}, retention 30 days" in ticket.body


def test_quotes_stay_when_the_setting_keeps_them_and_the_entry_says_the_trace_expired(client, project, owner,
                                                                                       settings):
    settings.CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES = True
    traces, insight, ticket = _setup(project)
    day = _expire(project, insight, ticket)
    gone = [t.trace_id for t in traces[:2]]

    page = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert page.count(SECRET) == 2 and "quote removed" not in page
    _says_expired(page, gone, day, project)

    body = client.get(f"/api/v1/insights/{insight.pk}/evidence/").json()
    assert {(e["quote"], e["quote_removed"], e["retention_days"]) for e in body["expired"]} == {(SECRET, False, 30)}

    detail = client.get(f"/api/v1/tickets/{ticket.pk}/").json()
    expired = [e for e in detail["evidence"] if e["trace_id"] in gone]
    assert [e["quote"] for e in expired] == [SECRET, SECRET] and not any(e.get("quote_removed") for e in expired)
    assert all(e["expired_at"].startswith(day) and e["retention_days"] == 30 for e in expired)
    assert SECRET in detail["body"] and "Quote removed" not in detail["body"]
    assert f"trace expired on {day}, retention 30 days" in detail["body"]
    assert JudgeCacheEntry.objects.filter(key="k" * 64).exists()


def test_settings_page_says_whether_quotes_outlive_their_traces(project, owner, settings):
    url = f"/p/{project.slug}/settings/retention/"
    settings.CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES = False
    page = client_for(owner).get(url).content.decode()
    assert 'data-testid="retention-quotes"' in page and "Evidence quotes go with their traces" in page
    assert "CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES" in page
    settings.CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES = True
    page = client_for(owner).get(url).content.decode()
    assert "Evidence quotes are kept after their traces expire" in page
