"""Property-based requests from the served OpenAPI schema (schemathesis) against every /api/v1/ operation: no 5xx,
and every status, content type, header and body is one the schema documents. Each operation gets a bounded number
of generated requests, sent once as generated and once aimed at real objects of the key's project."""

import re

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.test_scoping import OPERATIONS, PATH_OBJECTS, QUERY_OBJECTS

EXAMPLES_PER_OPERATION = 15
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@pytest.fixture
def served_schema(db, settings):
    """The schema as /api/schema/ serves it, requests sent in-process through the WSGI application."""
    settings.CLEAR_API_RATE = ""  # hundreds of requests a minute from one key
    # The WSGI handler closes the database connection after each request, which would end the test's
    # transaction; Django's own test client switches this off the same way.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


# schemathesis's own pytest integration (from_fixture) does not run under pytest 9, so each operation is one
# parametrised test that draws its cases from schemathesis's strategy with Hypothesis.
@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_the_api_keeps_to_its_schema(method, path, served_schema, mine):
    operation = served_schema[path][method]
    headers = {"Authorization": f"Bearer {mine.key.secret}"}
    names = re.findall(r"{(\w+)}", path)

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS, headers=headers)
        if names or path in QUERY_OBJECTS:  # aimed at the key's real objects, so success bodies are checked too
            case.path_parameters = {name: PATH_OBJECTS[name](mine) for name in names}
            if path in QUERY_OBJECTS:
                case.query = {**(case.query or {}), **QUERY_OBJECTS[path](mine)}
                for side in ("base", "head"):  # the run ids name each side; a release as well would be a 400
                    case.query.pop(f"{side}_release", None)
            response = case.call(headers=headers)
            case.validate_response(response, checks=CHECKS, headers=headers)

    check()
