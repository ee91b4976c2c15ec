"""The conventions every /api/v1/ endpoint shares: cursor pages, the rate limit per key, one error body."""

from datetime import timedelta

import pytest
from django.core.cache import caches
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from tests.api.conftest import T0, make_trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def test_pages_follow_next_and_previous_links(client, project):
    traces = [make_trace(project, start=T0 + timedelta(minutes=i), spans=1) for i in range(7)]
    make_trace(project, start=T0 + timedelta(minutes=3), spans=1)  # a tie on the sort key
    newest_first = [t.trace_id for t in sorted(
        project.traces.all(), key=lambda t: (t.start_time, t.pk), reverse=True)]
    assert len(traces) + 1 == len(newest_first)

    pages, url = [], "/api/v1/traces/?page_size=3"
    while url:
        body = client.get(url).json()
        pages.append(body)
        url = body["next"]
    assert [len(p["results"]) for p in pages] == [3, 3, 2]
    assert [row["trace_id"] for p in pages for row in p["results"]] == newest_first
    assert pages[0]["previous"] is None and pages[-1]["next"] is None
    assert "page_size=3" in pages[0]["next"] and pages[0]["next"].startswith("http")

    back = client.get(pages[-1]["previous"]).json()
    assert back["results"] == pages[1]["results"]
    first = client.get(back["previous"]).json()
    assert first["results"] == pages[0]["results"] and first["previous"] is None


def test_filters_combine_with_pages(client, project):
    make_trace(project, release="r1", outcome="failure", node="planner", task_id="t-1")
    wanted = make_trace(project, release="r2", outcome="failure", node="coder", task_id="t-2",
                        start=T0 + timedelta(hours=1))
    make_trace(project, release="r2", outcome="success", node="coder", start=T0 + timedelta(hours=2))
    query = {"release": "r2", "outcome": "failure", "node": "coder", "task_id": "t-2",
             "since": (T0 + timedelta(minutes=30)).isoformat(), "until": (T0 + timedelta(hours=2)).isoformat()}
    body = client.get("/api/v1/traces/", query).json()
    assert [row["trace_id"] for row in body["results"]] == [wanted.trace_id]
    assert client.get("/api/v1/traces/", {"node": "nobody"}).json()["results"] == []


@pytest.mark.parametrize("query, code", [
    ({"cursor": "not-a-cursor"}, "invalid_cursor"),
    ({"cursor": "eyJrIjpbIm5vdCBhIGRhdGUiLDFdLCJyIjowfQ"}, "invalid_cursor"),  # {"k": ["not a date", 1], "r": 0}
    ({"page_size": "0"}, "invalid"),
    ({"page_size": "100000"}, "invalid"),
    ({"outcome": "maybe"}, "invalid"),
    ({"since": "yesterday"}, "invalid"),
])
def test_bad_query_parameters_are_400_with_the_error_body(client, query, code):
    response = client.get("/api/v1/traces/", query)
    assert response.status_code == 400
    assert response.json()["code"] == code and set(response.json()) == {"message", "code", "extra"}


def test_unknown_paths_and_methods_use_the_error_body(client, project):
    response = client.get("/api/v1/nothing-here/")
    assert response.status_code == 404 and response.json()["code"] == "no_endpoint"
    assert response["Content-Type"] == "application/json"
    response = client.get("/api/v1/traces")
    assert response.status_code == 404 and "trailing slash" in response.json()["message"]
    response = client.get("/api/v1/runs/not-a-uuid/")
    assert response.status_code == 404 and set(response.json()) == {"message", "code", "extra"}
    response = client.put("/api/v1/traces/", {}, format="json")
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"
    response = client.post("/api/v1/rubrics/", {"name": "x"}, format="json")
    assert response.status_code == 400 and "kind" in response.json()["extra"]["fields"]
    response = client.post("/api/v1/rubrics/", "{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "parse_error"


def test_the_rate_limit_is_per_key_with_retry_after(client, project, owner, settings):
    settings.CLEAR_API_RATE = "3/min"
    other = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key_create(project=project, created_by=owner).secret}")
    assert [client.get("/api/v1/traces/").status_code for _ in range(3)] == [200, 200, 200]
    limited = client.get("/api/v1/runs/")
    assert limited.status_code == 429
    assert limited.json()["code"] == "throttled" and set(limited.json()) == {"message", "code", "extra"}
    assert 0 < int(limited["Retry-After"]) <= 60
    assert other.get("/api/v1/traces/").status_code == 200  # another key has its own budget
    caches["api_throttle"].clear()
    assert client.get("/api/v1/traces/").status_code == 200


def test_docs_and_schema_are_served_without_a_cdn(client):
    schema = APIClient().get("/api/schema/?format=json")
    assert schema.status_code == 200
    assert "/api/v1/traces/" in schema.json()["paths"]
    docs = APIClient().get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html and "cdn.jsdelivr" not in html and "/static/drf_spectacular_sidecar/" in html


def test_head_and_options_work_on_paths_shared_by_several_apis(client, project):
    trace = make_trace(project)
    assert client.head(f"/api/v1/traces/{trace.trace_id}/").status_code == 200
    options = client.options(f"/api/v1/traces/{trace.trace_id}/")
    assert options.status_code == 200
    patch = client.patch(f"/api/v1/traces/{trace.trace_id}/", {}, format="json")
    assert patch.status_code == 405 and patch.json()["code"] == "method_not_allowed"
    assert {"GET", "DELETE"} <= {m.strip() for m in patch["Allow"].split(",")}
