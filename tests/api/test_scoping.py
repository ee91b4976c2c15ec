"""Every operation in the served schema: another project's object by id is a 404, lists never include it, and no
key is a 401 in the API's error body. New endpoints join these tests by being in the schema."""

import re
from urllib.parse import urlencode

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from clear.webhooks.models import Webhook
from diagnosis.models import DiagnosisRun, Insight, InsightStatement, Rubric
from diagnosis.tickets.models import Ticket
from evolution.models import EvolutionJob, EvolutionTarget
from traces.models import Trace

pytestmark = pytest.mark.django_db

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
OPERATIONS = sorted(
    (method.upper(), path) for path, methods in SCHEMA["paths"].items() if path.startswith("/api/v1/")
    for method in methods if method in ("get", "post", "put", "patch", "delete")
)
# How to name each project's object in a path; an endpoint with a new parameter fails here until it is added.
PATH_OBJECTS = {
    "trace_id": lambda data: data.trace.trace_id,
    "run_id": lambda data: str(data.run.id),
    "rubric_id": lambda data: data.rubric.id,
    "webhook_id": lambda data: data.webhook.id,
    "insight_id": lambda data: data.insight.id,
    "ticket_id": lambda data: data.ticket.id,
    "target_id": lambda data: data.target.id,
    "job_id": lambda data: data.job.id,
    "artifact_id": lambda data: data.artifact.id,
    "rollback_id": lambda data: data.rollback.id,
}
# The row field that identifies each list's objects, and that object in a project's data.
LISTS = {
    "/api/v1/traces/": ("trace_id", lambda data: data.trace.trace_id),
    "/api/v1/runs/": ("id", lambda data: str(data.run.id)),
    "/api/v1/feedback/": ("id", lambda data: data.feedback.id),
    "/api/v1/rubrics/": ("id", lambda data: data.rubric.id),
    "/api/v1/webhooks/": ("id", lambda data: data.webhook.id),
    "/api/v1/insights/": ("id", lambda data: data.insight.id),
    "/api/v1/tickets/": ("id", lambda data: data.ticket.id),
    "/api/v1/insights/{insight_id}/evidence/": ("id", lambda data: data.evidence.id),
    "/api/v1/insights/{insight_id}/statements/": ("id", lambda data: data.statement.id),
    "/api/v1/webhooks/{webhook_id}/deliveries/": ("id", lambda data: str(data.delivery.id)),
    "/api/v1/evolution/targets/": ("id", lambda data: data.target.id),
    "/api/v1/evolution/jobs/": ("id", lambda data: data.job.id),
}
BODIES = {
    ("POST", "/api/v1/traces/{trace_id}/outcome/"): {"outcome": "failure"},
    ("PATCH", "/api/v1/rubrics/{rubric_id}/"): {"name": "renamed"},
    ("PATCH", "/api/v1/webhooks/{webhook_id}/"): {"active": False},
    ("PATCH", "/api/v1/tickets/{ticket_id}/"): {"status": "fixed"},
    ("PUT", "/api/v1/tickets/tracker/"): {"repository": "acme/agent"},
    ("POST", "/api/v1/insights/{insight_id}/status/"): {"status": "fixed"},
    ("POST", "/api/v1/insights/{insight_id}/merge/"): {"into": 1},
    ("POST", "/api/v1/insights/{insight_id}/split/"): {"statement_ids": [1]},
    ("PATCH", "/api/v1/evolution/targets/{target_id}/"): {"push_url": "/tmp/elsewhere.git"},
}
# A person's decisions (issue 37): every key gets 403 before anything is looked up, another project's id included.
PERSON_ONLY = {("POST", "/api/v1/evolution/jobs/{job_id}/approve/"),
               ("POST", "/api/v1/evolution/jobs/{job_id}/discard/"),
               ("POST", "/api/v1/evolution/targets/{target_id}/rollback/")}
# Query parameters of operations that name objects in their query (a project's own objects).
QUERY_OBJECTS = {
    "/api/v1/compare/": lambda data: {"base_run": str(data.run.id), "head_run": str(data.run.id)},
}
QUERIES = {path: (lambda data, make=make: "?" + urlencode(make(data))) for path, make in QUERY_OBJECTS.items()}
# Requests whose query or body names another project's object: 404 as for an id in the path.
FOREIGN_REFERENCES = {
    "compare base_run": ("GET", lambda mine, theirs:
                         f"/api/v1/compare/?base_run={theirs.run.id}&head_run={mine.run.id}", None),
    "compare head_run": ("GET", lambda mine, theirs:
                         f"/api/v1/compare/?base_run={mine.run.id}&head_run={theirs.run.id}", None),
    "merge into": ("POST", lambda mine, theirs: f"/api/v1/insights/{mine.insight.id}/merge/",
                   lambda mine, theirs: {"into": theirs.insight.id}),
    "split statements": ("POST", lambda mine, theirs: f"/api/v1/insights/{mine.insight.id}/split/",
                         lambda mine, theirs: {"statement_ids": [theirs.statement.id]}),
    "evolution job target": ("POST", lambda mine, theirs: "/api/v1/evolution/jobs/",
                             lambda mine, theirs: {"target": theirs.target.id, "insight": mine.insight.id,
                                                   "backend": "scripted", "backend_config": {"script": {}}}),
    "evolution job insight": ("POST", lambda mine, theirs: "/api/v1/evolution/jobs/",
                              lambda mine, theirs: {"target": mine.target.id, "insight": theirs.insight.id,
                                                    "backend": "scripted", "backend_config": {"script": {}}}),
    "evolution job ticket": ("POST", lambda mine, theirs: "/api/v1/evolution/jobs/",
                             lambda mine, theirs: {"target": mine.target.id, "ticket": theirs.ticket.id,
                                                   "backend": "scripted", "backend_config": {"script": {}}}),
}


def _params(path: str) -> list[str]:
    return re.findall(r"{(\w+)}", path)


def _url(path: str, data) -> str:
    query = QUERIES[path](data) if path in QUERIES else ""
    for name in _params(path):
        assert name in PATH_OBJECTS, f"add how to name a {name} to PATH_OBJECTS"
        path = path.replace("{" + name + "}", str(PATH_OBJECTS[name](data)))
    return path + query


def _call(client: APIClient, method: str, url: str, body: dict | None = None):
    return getattr(client, method.lower())(url, body or {}, format="json") if method != "GET" \
        else client.get(url)


def _assert_error_body(response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"message", "code", "extra"}, body
    return body


def test_the_schema_lists_the_endpoints():
    paths = {path for _, path in OPERATIONS}
    assert {"/api/v1/traces/", "/api/v1/traces/{trace_id}/", "/api/v1/traces/{trace_id}/outcome/", "/api/v1/runs/",
            "/api/v1/runs/{run_id}/", "/api/v1/runs/{run_id}/cancel/", "/api/v1/feedback/", "/api/v1/rubrics/",
            "/api/v1/rubrics/{rubric_id}/", "/api/v1/webhooks/", "/api/v1/webhooks/{webhook_id}/",
            "/api/v1/webhooks/{webhook_id}/deliveries/", "/api/v1/insights/", "/api/v1/insights/{insight_id}/",
            "/api/v1/insights/{insight_id}/evidence/", "/api/v1/insights/{insight_id}/statements/",
            "/api/v1/insights/{insight_id}/confirm/", "/api/v1/insights/{insight_id}/reject/",
            "/api/v1/insights/{insight_id}/status/", "/api/v1/insights/{insight_id}/merge/",
            "/api/v1/insights/{insight_id}/split/", "/api/v1/compare/"} <= paths


def _routes(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.name or ""


def test_every_api_route_is_in_the_schema():
    paths = {path for _, path in OPERATIONS}
    for route, name in _routes(get_resolver().url_patterns):
        if not route.startswith("api/v1/") or name.startswith("legacy-") or name == "api-not-found":
            continue
        assert "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route) in paths, route


@pytest.mark.parametrize("method, path", [op for op in OPERATIONS if _params(op[1])])
def test_another_projects_object_is_not_found(method, path, mine, theirs):
    response = _call(mine.client(), method, _url(path, theirs), BODIES.get((method, path)))
    person_only = (method, path) in PERSON_ONLY
    body = _assert_error_body(response, 403 if person_only else 404)
    assert body["code"] == "person_required" or not person_only, body
    # Nothing of theirs changed.
    assert Trace.objects.filter(pk=theirs.trace.pk, outcome=None).exists()
    assert DiagnosisRun.objects.get(pk=theirs.run.pk).status == DiagnosisRun.Status.SUCCEEDED
    assert Rubric.objects.get(pk=theirs.rubric.pk).name == theirs.rubric.name
    assert Webhook.objects.get(pk=theirs.webhook.pk).active
    assert Ticket.objects.get(pk=theirs.ticket.pk).status == Ticket.Status.OPEN
    assert EvolutionTarget.objects.get(pk=theirs.target.pk).push_url == ""
    assert EvolutionJob.objects.get(pk=theirs.job.pk).state == "QUEUED"
    _assert_insight_untouched(theirs)
    # The owner reaches the same object.
    if method == "GET":
        assert _call(theirs.client(), method, _url(path, theirs)).status_code == 200


def _assert_insight_untouched(data) -> None:
    insight = Insight.objects.get(pk=data.insight.pk)
    assert (insight.review, insight.status, insight.merged_into_id) == ("unreviewed", "open", None)
    assert InsightStatement.objects.get(pk=data.statement.pk).node_insight_id == insight.pk


@pytest.mark.parametrize("name", sorted(FOREIGN_REFERENCES))
def test_another_projects_object_named_in_a_query_or_body_is_not_found(name, mine, theirs):
    method, url, body = FOREIGN_REFERENCES[name]
    response = _call(mine.client(), method, url(mine, theirs), body(mine, theirs) if body else None)
    _assert_error_body(response, 404)
    _assert_insight_untouched(theirs)
    _assert_insight_untouched(mine)


def _is_page(method: str, path: str) -> bool:
    schema = SCHEMA["paths"][path][method.lower()]["responses"].get("200", {})
    ref = schema.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
    return ref.startswith("#/components/schemas/Paginated")


@pytest.mark.parametrize("method, path", [op for op in OPERATIONS if op[0] == "GET" and _is_page(*op)])
def test_lists_hold_only_the_keys_project(method, path, mine, theirs):
    assert path in LISTS, f"add {path} to LISTS (its id field) so its scoping is tested"
    field, identify = LISTS[path]
    body = mine.client().get(_url(path, mine)).json()
    ids = {row[field] for row in body["results"]}
    assert identify(mine) in ids
    assert identify(theirs) not in ids


@pytest.mark.parametrize("method, path", [op for op in OPERATIONS if op[0] == "GET"])
def test_reads_never_show_another_projects_objects(method, path, mine, theirs):
    response = mine.client().get(_url(path, mine))
    assert response.status_code == 200, response.content[:300]
    text = response.content.decode()
    for marker in (theirs.marker, theirs.trace.trace_id, str(theirs.run.id)):
        assert marker not in text
    assert mine.marker in text or mine.trace.trace_id in text or str(mine.run.id) in text or path in (
        # the project itself; the attribution of an insight whose trace has no recorded failure: no rows to show
        "/api/v1/project/", "/api/v1/insights/{insight_id}/attribution/")


@pytest.mark.parametrize("method, path", OPERATIONS)
def test_a_missing_key_is_401_with_the_error_body(method, path, mine):
    body = _assert_error_body(_call(APIClient(), method, _url(path, mine), BODIES.get((method, path))), 401)
    assert body["code"] == "missing_credentials"


@pytest.mark.parametrize("method, path", OPERATIONS)
def test_a_wrong_key_is_401(method, path, mine):
    client = APIClient(HTTP_AUTHORIZATION="Bearer sk-clear-not-a-key")
    assert _assert_error_body(_call(client, method, _url(path, mine)), 401)["code"] == "invalid_credentials"
