"""Insights and tickets pages over the example support desk (rule judges and rubrics, insights built): access,
filters, review actions, exports, evidence links into the trace viewer, escaping of quoted trace content."""

from __future__ import annotations

import json

import pytest

from diagnosis.models import Insight, InsightEvidence
from diagnosis.services.insights import insights_build
from diagnosis.tickets.body import md_escape
from diagnosis.tickets.models import Ticket
from frontend.templatetags.clear_ui import md_inline  # titles are shown with their code spans rendered
from tests.frontend.conftest import PAYLOADS, Seeded, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def insighted(seeded) -> Seeded:
    assert insights_build(run=seeded.run) is not None
    return seeded


def _system(project) -> Insight:
    return (Insight.objects.filter(project=project, level="system", is_other=False, merged_into=None)
            .order_by("-frequency", "pk").first())


def _urls(project) -> dict[str, list[str]]:
    base = f"/p/{project.slug}"
    insight = _system(project)
    ticket = Ticket.objects.filter(project=project).order_by("pk").first()
    return {
        "get": [f"{base}/insights/", f"{base}/insights/{insight.pk}/", f"{base}/tickets/",
                f"{base}/tickets/?status=all", f"{base}/tickets/export/?output=csv"],
        "post": [f"{base}/insights/{insight.pk}/review/", f"{base}/insights/{insight.pk}/status/",
                 f"{base}/tickets/{ticket.pk}/status/"],
    }


def test_owner_gets_the_pages(insighted, owner):
    client = client_for(owner)
    for url in _urls(insighted.project)["get"]:
        response = client.get(url)
        assert response.status_code == 200, url
    html = client.get(f"/p/{insighted.project.slug}/").content.decode()
    assert 'data-testid="top-insights"' in html and md_inline(_system(insighted.project).title) in html
    assert ">Insights</a>" in html and ">Tickets</a>" in html


def test_outsiders_get_404_and_change_nothing(insighted, outsider, outsider_project):
    client = client_for(outsider)
    urls = _urls(insighted.project)
    for url in urls["get"]:
        assert client.get(url).status_code == 404, url
    for url in urls["post"]:
        assert client.post(url, {"action": "reject", "status": "fixed"}).status_code == 404, url
    # Nor through their own project.
    insight = _system(insighted.project)
    own = f"/p/{outsider_project.slug}"
    assert client.get(f"{own}/insights/{insight.pk}/").status_code == 404
    assert client.post(f"{own}/insights/{insight.pk}/status/", {"status": "fixed"}).status_code == 404
    assert not Insight.objects.filter(project=insighted.project).exclude(status="open").exists()
    assert not Insight.objects.filter(project=insighted.project, review="rejected").exists()
    assert not Ticket.objects.filter(project=insighted.project).exclude(status="open").exists()


def test_empty_state_says_to_run_a_diagnosis(seeded, owner):
    html = client_for(owner).get(f"/p/{seeded.project.slug}/insights/").content.decode()
    assert 'data-testid="empty-state"' in html and "Run a diagnosis" in html


def test_filters(insighted, owner):
    project, client = insighted.project, client_for(owner)
    base = f"/p/{project.slug}/insights/"

    def listed(query: str) -> set[int]:
        html = client.get(base + query).content.decode()
        return {i.pk for i in Insight.objects.filter(project=project) if f'data-insight="{i.pk}"' in html}

    everything = listed("")
    assert everything and 'data-testid="frequency-bar"' in client.get(base).content.decode()
    system = set(Insight.objects.filter(project=project, level="system").values_list("pk", flat=True))
    assert listed("?level=system") == system & everything
    billing = set(Insight.objects.filter(project=project, node="billing_worker").values_list("pk", flat=True))
    assert billing and listed("?level=node&node=billing_worker") == billing
    high = set(Insight.objects.filter(project=project, severity="high").values_list("pk", flat=True))
    assert listed("?severity=high") == high & everything
    assert listed("?release=r1") == everything
    assert listed("?release=r2") == set()  # r2 was never diagnosed
    assert listed("?status=fixed") == set()
    assert listed("?severity=bogus") == everything  # unknown values are ignored


def test_review_actions_change_the_insight(insighted, owner):
    project, client = insighted.project, client_for(owner)
    insight = _system(project)
    url = f"/p/{project.slug}/insights/{insight.pk}/"
    assert client.post(url + "status/", {"status": "acknowledged"}).status_code == 302
    insight.refresh_from_db()
    assert insight.status == "acknowledged"
    assert client.post(url + "review/", {"action": "confirm"}).status_code == 302
    insight.refresh_from_db()
    assert insight.review == "confirmed"
    response = client.post(url + "status/", {"status": "bogus"}, follow=True)
    assert "status must be one of" in response.content.decode()
    assert client.post(url + "status/", {"status": "fixed"}).status_code == 302
    assert Ticket.objects.get(project=project, insight=insight).status == "fixed"
    assert client.post(url + "review/", {"action": "reject"}).status_code == 302
    insight.refresh_from_db()
    assert insight.review == "rejected"
    assert f'data-insight="{insight.pk}"' not in client.get(f"/p/{project.slug}/insights/").content.decode()
    assert client.get(url + "review/").status_code == 405


def test_ticket_status_form_and_exports(insighted, owner):
    project, client = insighted.project, client_for(owner)
    tickets = list(Ticket.objects.filter(project=project).order_by("pk"))
    assert len(tickets) >= 3
    html = client.get(f"/p/{project.slug}/tickets/").content.decode()
    assert all(f'data-ticket="{t.pk}"' in html for t in tickets)
    response = client.post(f"/p/{project.slug}/tickets/{tickets[0].pk}/status/", {"status": "wont_fix"})
    assert response.status_code == 302 and response["Location"].endswith("/tickets/?status=open")
    tickets[0].refresh_from_db()
    assert tickets[0].status == "wont_fix"
    html = client.get(f"/p/{project.slug}/tickets/?status=wont_fix").content.decode()
    assert f'data-ticket="{tickets[0].pk}"' in html and f'data-ticket="{tickets[1].pk}"' not in html

    still_open = Ticket.objects.filter(project=project, status__in=["open", "in_progress"])
    assert still_open.count() == len(tickets) - 1
    for output in ("md", "csv", "json"):
        response = client.get(f"/p/{project.slug}/tickets/export/?output={output}&status=open")
        assert response.status_code == 200
        assert response["Content-Disposition"].startswith("attachment;"), output
        text = response.content.decode()
        for ticket in still_open:
            title = md_escape(ticket.title) if output == "md" else ticket.title
            assert title in text, (output, ticket.title)
        if output == "json":
            assert {t["title"] for t in json.loads(text)["tickets"]} == set(still_open.values_list("title", flat=True))
    assert client.get(f"/p/{project.slug}/tickets/export/?output=exe").status_code == 404


def test_detail_links_evidence_to_the_viewer_at_the_span(insighted, owner):
    project, client = insighted.project, client_for(owner)
    insight = _system(project)
    html = client.get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    evidence = InsightEvidence.objects.filter(insight=insight).select_related("trace").first()
    assert f"/p/{project.slug}/traces/{evidence.trace.trace_id}/?span={evidence.span_id}" in html
    for text in (md_inline(insight.title), "Trend by release", "Node-level insights it contains", "Evolve", "csrfmiddlewaretoken"):
        assert text in html
    assert f'/p/{project.slug}/evolution/new/?insight={insight.pk}" data-testid="evolve"' in html
    for link in insight.node_links.select_related("node"):
        assert f"/p/{project.slug}/insights/{link.node.pk}/" in html
    ticket = Ticket.objects.get(project=project, insight=insight)
    assert f"#ticket-{ticket.pk}" in html


def test_script_in_an_evidence_quote_is_escaped(insighted, owner):
    project = insighted.project
    insight = _system(project)
    evidence = InsightEvidence.objects.filter(insight=insight).order_by("-run__created_at", "trace_id", "span_id",
                                                                          "pk").first()
    InsightEvidence.objects.filter(pk=evidence.pk).update(quote=PAYLOADS["script"],
                                                          statement_text=PAYLOADS["img"])
    html = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    assert PAYLOADS["script"] not in html and PAYLOADS["img"] not in html
    assert "<mark class=\"quote\">&lt;script&gt;" in html


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_walk_from_overview_to_the_cited_span(live_server, page, project, owner, settings, axe_path):
    from tests.frontend.conftest import seed_project
    from tests.frontend.support import login
    from tests.frontend.support import Checker

    settings.CLEAR_JUDGE_MODEL = ""
    insights_build(run=seed_project(project).run)
    check = Checker(page, axe_path)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server.url)
    page.wait_for_selector("[data-testid=top-insights]")

    page.click("nav[aria-label=Project] >> text=Insights")
    page.wait_for_selector("[data-testid=insight-table]")
    check("ui-insights")
    page.select_option("#id_level", "system")
    page.click("[data-testid=insight-filters] button[type=submit]")
    page.wait_for_selector("[data-testid=insight-table]")
    assert "level=system" in page.url

    page.click("[data-testid=insight-table] tbody tr >> nth=0 >> [data-testid=insight-link]")
    page.wait_for_selector("[data-testid=insight-evidence]")
    assert "/evolution/new/?insight=" in page.locator("[data-testid=evolve]").get_attribute("href")
    check("ui-insight")

    link = page.locator("[data-testid=insight-evidence-link] >> nth=0")
    span_id = link.get_attribute("href").split("span=")[1].split("&")[0]
    link.click()
    page.wait_for_selector(".span-row.selected")
    assert page.get_attribute(".span-row.selected", "data-span-id") == span_id
    assert f"span={span_id}" in page.url

    page.click("nav[aria-label=Project] >> text=Tickets")
    page.wait_for_selector("[data-testid=ticket-table]")
    first = page.locator("[data-testid=ticket-table] tbody tr >> nth=0")
    ticket_id = first.get_attribute("data-ticket")
    first.locator("select").select_option("in_progress")
    first.locator("button[type=submit]").click()
    page.wait_for_selector(f"[data-ticket='{ticket_id}'] select")
    assert page.locator(f"[data-ticket='{ticket_id}'] select").input_value() == "in_progress"
    check("ui-tickets")
    assert not errors, errors
    check.assert_clean()
