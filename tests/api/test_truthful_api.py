"""Issue 26, items 10 and 11: the REST API says what the UI says and refuses what it would silently ignore.

- An insight in the list and the detail carries its failure association (as the insight page words it: associated,
  not associated or unknown, the lift, and the pattern's share of failing vs succeeding traces) and its ticket.
- A query parameter an operation does not read is a 400 naming it and listing the accepted ones, on every
  /api/v1/ operation (`/api/v1/feedback/?trace_id=…` used to return every row); pagination and `format` pass.
- The schema (/api/docs/) describes the ingestion endpoints, and the UI links to /api/docs/.
"""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver
from rest_framework.test import APIClient

from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence, RunTrace
from diagnosis.tickets.models import Ticket
from tests.api.conftest import T0, make_trace
from tests.api.test_scoping import OPERATIONS, PATH_OBJECTS, QUERY_OBJECTS, SCHEMA
from traces import urls as traces_urls

pytestmark = pytest.mark.django_db

INGESTION_PATHS = ["/v1/traces", "/api/public/otel/v1/traces", "/api/public/ingestion", "/api/public/scores"]


def _insight_with_outcomes(project):
    """An insight whose last run judged 3 failing traces (2 with the pattern), 4 succeeding ones (1 with it) and one
    without an outcome (with it), with a ticket pushed to the tracker."""
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.SUCCEEDED, judges=["rules"],
                                      insights_status="done")
    plan = ["failure+", "failure+", "failure", "success+", "success", "success", "success", "none+"]
    traces = []
    for index, kind in enumerate(plan):
        outcome = kind.rstrip("+")
        trace = make_trace(project, start=T0 + timedelta(minutes=index),
                           outcome=None if outcome == "none" else outcome)
        RunTrace.objects.create(run=run, trace=trace, status=RunTrace.Status.DONE)
        traces.append((trace, kind.endswith("+")))
    insight = Insight.objects.create(project=project, level=Insight.Level.NODE, node="planner",
                                     title="routes refunds to orders", count=4, trace_count=4, frequency=0.5,
                                     lift=2.7, lift_low=1.4, lift_high=5.2, last_run=run, first_run=run,
                                     last_seen=T0 + timedelta(days=1))
    InsightOccurrence.objects.create(insight=insight, run=run, count=4, trace_count=4, judged=8, frequency=0.5,
                                     lift=2.7, lift_low=1.4, lift_high=5.2,
                                     trace_ids=[trace.trace_id for trace, with_it in traces if with_it])
    ticket = Ticket.objects.create(project=project, insight=insight, fingerprint="fp-refunds", title="refunds",
                                   level="node", node="planner", severity="high", status=Ticket.Status.IN_PROGRESS,
                                   external_number=42, external_url="https://tracker.example/acme/agent/issues/42")
    return run, insight, ticket


def _assert_association_and_ticket(row: dict, run, ticket) -> None:
    assert row["failure_association"] == "associated"
    assert (row["lift"], row["lift_low"], row["lift_high"]) == (2.7, 1.4, 5.2)
    assert row["outcome_shares"] == {
        "run_id": str(run.pk), "failing_traces": 3, "failing_with_pattern": 2, "failing_share": pytest.approx(2 / 3),
        "succeeding_traces": 4, "succeeding_with_pattern": 1, "succeeding_share": 0.25}
    assert row["ticket"] == {"id": ticket.pk, "status": "in_progress", "external_number": 42,
                             "external_url": "https://tracker.example/acme/agent/issues/42",
                             "url": f"/api/v1/tickets/{ticket.pk}/"}


def test_insight_list_and_detail_carry_the_failure_association_and_the_ticket(mine):
    run, insight, ticket = _insight_with_outcomes(mine.project)
    client = mine.client()
    rows = {row["id"]: row for row in client.get("/api/v1/insights/").json()["results"]}
    _assert_association_and_ticket(rows[insight.pk], run, ticket)
    _assert_association_and_ticket(client.get(f"/api/v1/insights/{insight.pk}/").json(), run, ticket)
    # A review answers with the same body.
    _assert_association_and_ticket(client.post(f"/api/v1/insights/{insight.pk}/confirm/", {}, format="json").json(),
                                   run, ticket)
    # The fixture's insight: no lift (outcomes unknown), no run, its own ticket.
    other = rows[mine.insight.pk]
    assert other["failure_association"] == "unknown"
    assert other["outcome_shares"] == {"run_id": None, "failing_traces": 0, "failing_with_pattern": 0,
                                       "failing_share": None, "succeeding_traces": 0, "succeeding_with_pattern": 0,
                                       "succeeding_share": None}
    assert other["ticket"]["id"] == mine.ticket.pk and other["ticket"]["status"] == "open"
    # Not associated: the lift interval includes 1. No ticket: null.
    Ticket.objects.filter(pk=ticket.pk).delete()
    Insight.objects.filter(pk=insight.pk).update(lift=1.1, lift_low=0.6, lift_high=2.0)
    detail = client.get(f"/api/v1/insights/{insight.pk}/").json()
    assert detail["failure_association"] == "not_associated" and detail["ticket"] is None


def test_the_schema_documents_association_and_ticket():
    fields = SCHEMA["components"]["schemas"]["InsightOutput"]["properties"]
    assert {"failure_association", "outcome_shares", "ticket"} <= set(fields)
    shares = SCHEMA["components"]["schemas"]["OutcomeShares"]["properties"]
    assert {"failing_share", "succeeding_share", "failing_traces", "succeeding_traces"} <= set(shares)


def _unknown(response, name: str) -> dict:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    body = response.json()
    assert body["code"] == "unknown_parameter" and name in body["extra"]["unknown"], body
    assert name in body["message"]
    for accepted in body["extra"]["accepted"]:
        assert accepted in body["message"]
    return body


def test_a_misspelt_feedback_filter_is_a_400_naming_it_and_the_accepted_ones(mine):
    client = mine.client()
    body = _unknown(client.get("/api/v1/feedback/", {"trace_id": mine.trace.trace_id}), "trace_id")
    assert body["extra"]["unknown"] == ["trace_id"]
    assert body["extra"]["accepted"] == ["run", "trace", "judge", "verdict", "cursor", "page_size", "format"]
    rows = client.get("/api/v1/feedback/", {"trace": mine.trace.trace_id, "page_size": 1, "format": "json"})
    assert [row["id"] for row in rows.json()["results"]] == [mine.feedback.pk]
    # A few others: a list filter, a detail, compare, the key check, and a write.
    _unknown(client.get("/api/v1/traces/", {"releas": "r1"}), "releas")
    assert _unknown(client.get(f"/api/v1/insights/{mine.insight.pk}/", {"verbose": "1"}),
                    "verbose")["extra"]["accepted"] == ["format"]
    _unknown(client.get("/api/v1/compare/", {"base": str(mine.run.pk), "head_run": str(mine.run.pk)}), "base")
    _unknown(client.get("/api/v1/project/", {"project": "x"}), "project")
    _unknown(client.post(f"/api/v1/insights/{mine.insight.pk}/confirm/?dry_run=1", {}, format="json"), "dry_run")
    assert Insight.objects.get(pk=mine.insight.pk).review == Insight.Review.UNREVIEWED
    # Without a key the 401 comes first: the rule tells nothing to an anonymous caller.
    assert APIClient().get("/api/v1/feedback/", {"trace_id": "x"}).status_code == 401


def _documented_query(method: str, path: str) -> set[str]:
    operation = SCHEMA["paths"][path][method.lower()]
    return {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}


GETS = [path for method, path in OPERATIONS if method == "GET"]


@pytest.mark.parametrize("path", GETS)
def test_every_get_operation_refuses_an_unknown_parameter_and_accepts_its_documented_ones(path, mine):
    url = path
    for name in re.findall(r"{(\w+)}", path):
        url = url.replace("{" + name + "}", str(PATH_OBJECTS[name](mine)))
    query = QUERY_OBJECTS[path](mine) if path in QUERY_OBJECTS else {}
    client = mine.client()
    body = _unknown(client.get(url, {**query, "bogus_param": "1"}), "bogus_param")
    documented = _documented_query("GET", path)
    assert set(body["extra"]["accepted"]) == documented | {"format"}
    paging = {"page_size": "1"} if "page_size" in documented else {}
    response = client.get(url, {**query, **paging, "format": "json"})
    assert response.status_code == 200, (path, response.content[:300])


def test_ingestion_keeps_taking_query_parameters(mine):
    """SDKs and collectors may add query parameters; ingestion is not under the rule."""
    response = Client().post("/v1/traces?source=collector", data=b"{}", content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {mine.key.secret}")
    assert response.status_code == 200, response.content


def _routes(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def test_the_schema_describes_every_ingestion_endpoint():
    served = APIClient().get("/api/schema/?format=json").json()
    ingestion = {"/" + route for route in _routes(traces_urls.urlpatterns) if not route.startswith("api/v1/")}
    assert ingestion == set(INGESTION_PATHS)
    for path in INGESTION_PATHS:
        operation = served["paths"][path]["post"]
        assert operation["description"] and operation["requestBody"]["required"] is True
        assert "application/json" in operation["requestBody"]["content"]
    for path in ("/v1/traces", "/api/public/otel/v1/traces"):
        operation = served["paths"][path]["post"]
        assert set(operation["requestBody"]["content"]) == {"application/json", "application/x-protobuf"}
        assert {"200", "400", "401", "413", "415", "429", "503"} <= set(operation["responses"])
        assert "partialSuccess" in operation["responses"]["200"]["content"]["application/json"]["schema"]["properties"]
    assert {"successes", "errors"} <= set(
        served["paths"]["/api/public/ingestion"]["post"]["responses"]["207"]["content"]["application/json"]["schema"]
        ["properties"])
    assert {"200", "202", "207", "400"} <= set(served["paths"]["/api/public/scores"]["post"]["responses"])
    assert served["components"]["securitySchemes"]["projectKeyBasic"]["scheme"] == "basic"


def test_the_pages_link_to_the_api_docs(project, owner):
    client = Client()
    client.force_login(owner)
    link = re.compile(r'<a [^>]*href="/api/docs/"[^>]*data-testid="api-docs-link"')
    for url in (f"/p/{project.slug}/", f"/p/{project.slug}/settings/api-keys/"):
        html = client.get(url, follow=True).content.decode()
        assert link.search(html), url
    keys = client.get(f"/p/{project.slug}/settings/api-keys/", follow=True).content.decode()
    assert re.search(r'<a href="/api/docs/" data-testid="api-keys-docs-link"', keys)
    assert Client().get("/api/docs/").status_code == 200
