"""Issue 24.5: repaired and rejected spans are visible. A span whose name is too long is repaired and one whose start
time means nothing is rejected; both are counted per project, day and reason (rejected spans are not stored, so the
counter is the only trace of them), the trace carries a "repaired" badge in the list and on its page, and Settings'
ingestion health lists both. A clean batch writes no counter and costs no query more than before."""

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from traces.models import IngestIssueCount, Trace
from traces.normalize import decode_export_request

pytestmark = pytest.mark.django_db

TRACE = "5b8efff798038103d269b633813fc60c"
START, END = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000


def _span(span_id: str, *, name: str = "step", start: str | None = str(START), end: str | None = str(END),
          trace_id: str = TRACE) -> dict:
    span = {"traceId": trace_id, "spanId": span_id, "name": name, "attributes": []}
    if start is not None:
        span["startTimeUnixNano"] = start
    if end is not None:
        span["endTimeUnixNano"] = end
    return span


def _post(key, *spans: dict):
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "app"}, "spans": list(spans)}]}]})
    response = Client().post("/v1/traces", data=body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert response.status_code == 200, response.content[:500]
    return response.json().get("partialSuccess", {})


def _messy_batch(key) -> None:
    partial = _post(key, _span("eee19b7ec3c1b173", name="good"),
                    _span("eee19b7ec3c1b174", name="n" * 400),
                    _span("eee19b7ec3c1b175", name="bad clock", start="abc", end=None))
    assert int(partial.get("rejectedSpans", 0)) == 1


def _counts(project) -> dict[tuple[str, str], int]:
    return {(row.kind, row.reason): row.count for row in IngestIssueCount.objects.filter(project=project)}


def test_repaired_and_rejected_spans_are_counted_per_reason(project, issued_key):
    _messy_batch(issued_key)
    assert _counts(project) == {("repaired", "truncated"): 1, ("rejected", "invalid_timestamp"): 1}
    assert Trace.objects.get(project=project, trace_id=TRACE).repaired_spans == 1
    _messy_batch(issued_key)  # the same batch again: the counters add, the stored span is not counted twice
    assert _counts(project) == {("repaired", "truncated"): 2, ("rejected", "invalid_timestamp"): 2}
    assert Trace.objects.get(project=project, trace_id=TRACE).repaired_spans == 1


def test_the_trace_list_and_page_show_the_badge(project, issued_key, teammate):
    _messy_batch(issued_key)
    _post(issued_key, _span("aaa19b7ec3c1b173", name="clean", trace_id="6b8efff798038103d269b633813fc60c"))
    client = Client()
    client.force_login(teammate)
    listing = client.get(f"/p/{project.slug}/traces/").content.decode()
    assert listing.count('data-testid="repaired-badge"') == 1
    row = listing.split(f'data-trace-id="{TRACE}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-testid="repaired-badge"' in row
    page = client.get(f"/p/{project.slug}/traces/{TRACE}/").content.decode()
    assert 'data-testid="repaired-badge"' in page and "1 span repaired" in page


def test_settings_lists_both_to_any_member(project, issued_key, teammate, outsider):
    _messy_batch(issued_key)
    client = Client()
    client.force_login(teammate)  # a member, not an owner
    response = client.get(f"/p/{project.slug}/settings/ingestion-health/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-kind="rejected" data-reason="invalid_timestamp"' in html
    assert 'data-kind="repaired" data-reason="truncated"' in html
    assert "start time was missing" in html and "was cut and its original length recorded" in html
    outsider_client = Client()
    outsider_client.force_login(outsider)
    assert outsider_client.get(f"/p/{project.slug}/settings/ingestion-health/").status_code == 404


def test_settings_without_issues_says_so(project, teammate):
    client = Client()
    client.force_login(teammate)
    html = client.get(f"/p/{project.slug}/settings/ingestion-health/").content.decode()
    assert "Nothing repaired or rejected" in html


def test_a_clean_batch_writes_no_counter_and_no_extra_query(project, issued_key):
    _post(issued_key, _span("eee19b7ec3c1b173"))  # warm up: the key lookup and the first trace row
    with CaptureQueriesContext(connection) as clean:
        _post(issued_key, _span("eee19b7ec3c1b176", trace_id="7b8efff798038103d269b633813fc60c"))
    assert not IngestIssueCount.objects.exists()
    assert not any("ingest_issue" in q["sql"].lower() for q in clean.captured_queries)
    with CaptureQueriesContext(connection) as messy:
        _post(issued_key, _span("eee19b7ec3c1b177", name="n" * 400, trace_id="8b8efff798038103d269b633813fc60c"))
    # A repair costs one upsert of the counters and one UPDATE of the trace's repaired_spans.
    assert len(messy.captured_queries) <= len(clean.captured_queries) + 2


@pytest.mark.parametrize("span, reason, message", [
    ({"start_time_unix_nano": 2**63 + 1}, "invalid_timestamp",
     "startTimeUnixNano '9223372036854775809' is out of range"),
    ({"trace_id": bytes(16)}, "invalid_trace_id", "traceId is all zeros"),
    ({"span_id": b""}, "invalid_span_id", "spanId is missing"),
    ({"parent_span_id": b"\x03" * 3}, "invalid_parent_span_id", "parentSpanId has 3 bytes, expected 8"),
], ids=["time", "trace-id", "span-id", "parent"])
def test_protobuf_rejections_are_counted_under_their_reason(span, reason, message):
    # The reason is set where the decoder refuses the span; the message is for the exporter and stays as it was.
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(
        **{"trace_id": bytes.fromhex(TRACE), "span_id": b"\x02" * 8, "name": "x", **span})
    [rejection] = decode_export_request(body=request.SerializeToString(),
                                        content_type="application/x-protobuf").rejected
    assert (rejection.reason, rejection.message) == (reason, f"span 0 ('x'): {message}")
