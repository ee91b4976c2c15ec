"""Issue 24.3: a resend that changes a stored span of a judged trace marks the trace "changed since judged" (the API,
the trace list and the trace page say so, and the next run judges it again: tests/diagnosis/test_continuous.py); an
identical resend, or a change before the trace was judged, marks nothing."""

import json

import pytest
from django.test import Client
from django.utils import timezone

from traces.models import Trace
from traces.services.lifecycle import trace_judged_mark

pytestmark = pytest.mark.django_db

TRACE = "6c8efff798038103d269b633813fc60d"
START, END = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000


def _post(key, *, message: str = "") -> dict:
    spans = [{"traceId": TRACE, "spanId": "aaa19b7ec3c1b173", "name": "agent", "startTimeUnixNano": str(START),
              "endTimeUnixNano": str(END), "attributes": []},
             {"traceId": TRACE, "spanId": "aaa19b7ec3c1b174", "parentSpanId": "aaa19b7ec3c1b173", "name": "tool",
              "startTimeUnixNano": str(START), "endTimeUnixNano": str(END), "attributes": [],
              "status": {"code": 2, "message": message} if message else {}}]
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "app"}, "spans": spans}]}]})
    response = Client().post("/v1/traces", data=body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert response.status_code == 200, response.content[:500]
    return response.json()


def _api(key) -> dict:
    response = Client().get(f"/api/v1/traces/{TRACE}/", HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert response.status_code == 200
    return response.json()


def test_a_changed_resend_of_a_judged_trace_is_marked_and_shown(project, issued_key, teammate):
    _post(issued_key)
    _post(issued_key, message="first")  # changed before any judging: nothing to mark
    trace = Trace.objects.get(project=project, trace_id=TRACE)
    assert trace.content_changed_at is None and not _api(issued_key)["changed_since_judged"]

    trace_judged_mark(trace_pk=trace.pk, at=timezone.now())
    _post(issued_key, message="first")  # an exporter's retry: identical, says nothing
    assert not _api(issued_key)["changed_since_judged"]

    reply = _post(issued_key, message="upstream timeout")
    assert "updated by this resend" in reply["partialSuccess"]["errorMessage"]
    body = _api(issued_key)
    assert body["changed_since_judged"] and body["judged_at"]

    client = Client()
    client.force_login(teammate)
    for url in (f"/p/{project.slug}/traces/", f"/p/{project.slug}/traces/{TRACE}/"):
        page = client.get(url)
        assert page.status_code == 200 and b'data-testid="changed-badge"' in page.content, url

    trace_judged_mark(trace_pk=trace.pk, at=timezone.now())  # judged again: the mark goes
    assert not _api(issued_key)["changed_since_judged"]
