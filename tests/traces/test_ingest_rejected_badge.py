"""Issue 24: a trace with rejected spans carries a badge. A span refused at ingestion whose trace id was usable is
counted on its stored trace (OTLP JSON, OTLP protobuf, Langfuse, file import), the trace page and list show "N spans
rejected" and /api/v1/traces/{id}/ says so; a span without a usable trace id counts only in the project's ingestion
health, and no trace row is made for rejected spans alone. The reason is decided where the span is refused."""

import base64
import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework.test import APIClient

from traces.models import IngestIssueCount, Trace
from traces.normalize import decode_export_request, normalize_ingestion_batch
from traces.normalize.values import langfuse_trace_id
from traces.services.imports import traces_import

pytestmark = pytest.mark.django_db

TRACE = "5b8efff798038103d269b633813fc60c"
OTHER_TRACE = "6b8efff798038103d269b633813fc60c"
START, END = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000


def _span(span_id: str, *, trace_id: str = TRACE, start: str | None = str(START), **extra) -> dict:
    span = {"traceId": trace_id, "spanId": span_id, "name": f"step {span_id[-2:]}", "attributes": [],
            "endTimeUnixNano": str(END), **extra}
    if start is not None:
        span["startTimeUnixNano"] = start
    return span


def _json_request(*spans: dict) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "app"}, "spans": list(spans)}]}]})


def _post(key, body, content_type: str = "application/json"):
    response = Client().post("/v1/traces", data=body, content_type=content_type,
                             HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert response.status_code == 200, response.content[:500]
    if content_type == "application/json":
        return int(response.json().get("partialSuccess", {}).get("rejectedSpans", 0))
    return trace_service_pb2.ExportTraceServiceResponse.FromString(response.content).partial_success.rejected_spans


def _rejected(project, reason: str) -> int:
    row = IngestIssueCount.objects.filter(project=project, kind="rejected", reason=reason).first()
    return row.count if row else 0


def _api_trace(key, trace_id: str = TRACE) -> dict:
    response = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}").get(f"/api/v1/traces/{trace_id}/")
    assert response.status_code == 200
    return response.json()


# --- OTLP/JSON -----------------------------------------------------------------------------------------------------


def test_a_rejected_span_counts_on_its_trace_and_shows_a_badge(project, issued_key, teammate):
    rejected = _post(issued_key, _json_request(_span("eee19b7ec3c1b173"), _span("eee19b7ec3c1b174"),
                                               _span("eee19b7ec3c1b175", start="abc", endTimeUnixNano=None)))
    assert rejected == 1
    trace = Trace.objects.get(project=project, trace_id=TRACE)
    assert trace.rejected_spans == 1 and trace.repaired_spans == 0
    assert _rejected(project, "invalid_timestamp") == 1
    data = _api_trace(issued_key)
    assert data["rejected_spans"] == 1 and data["repaired_spans"] == 0 and len(data["spans"]) == 2

    _post(issued_key, _json_request(_span("aaa19b7ec3c1b173", trace_id=OTHER_TRACE)))
    client = Client()
    client.force_login(teammate)
    page = client.get(f"/p/{project.slug}/traces/{TRACE}/").content.decode()
    assert 'data-testid="rejected-badge"' in page and "1 span rejected" in page
    assert f'href="/p/{project.slug}/settings/ingestion-health/"' in page.split('data-testid="rejected-badge"')[0]
    listing = client.get(f"/p/{project.slug}/traces/").content.decode()
    assert listing.count('data-testid="rejected-badge"') == 1
    row = listing.split(f'data-trace-id="{TRACE}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-testid="rejected-badge"' in row and "1 span rejected" in row
    clean_page = client.get(f"/p/{project.slug}/traces/{OTHER_TRACE}/").content.decode()
    assert 'data-testid="rejected-badge"' not in clean_page


def test_rejections_add_up_across_requests_and_reasons(project, issued_key):
    _post(issued_key, _json_request(_span("eee19b7ec3c1b173")))
    # The trace row exists from the first request: a later request of rejected spans only still counts on it.
    rejected = _post(issued_key, _json_request(
        _span("eee19b7ec3c1b174", start="-1", endTimeUnixNano=None),
        _span("0" * 16),
        _span("eee19b7ec3c1b176", parentSpanId="abc"),
    ))
    assert rejected == 3
    assert Trace.objects.get(project=project, trace_id=TRACE).rejected_spans == 3
    assert (_rejected(project, "invalid_timestamp"), _rejected(project, "invalid_span_id"),
            _rejected(project, "invalid_parent_span_id")) == (1, 1, 1)


def test_a_span_without_a_usable_trace_id_counts_only_in_ingest_health(project, issued_key):
    rejected = _post(issued_key, _json_request(_span("eee19b7ec3c1b173"), _span("eee19b7ec3c1b174", trace_id="0" * 32),
                                               _span("eee19b7ec3c1b175", trace_id="abc")))
    assert rejected == 2
    assert Trace.objects.get(project=project, trace_id=TRACE).rejected_spans == 0
    assert _rejected(project, "invalid_trace_id") == 2


def test_rejected_spans_alone_make_no_trace_row(project, issued_key):
    rejected = _post(issued_key, _json_request(_span("eee19b7ec3c1b175", start="abc", endTimeUnixNano=None)))
    assert rejected == 1
    assert not Trace.objects.filter(project=project).exists()
    assert _rejected(project, "invalid_timestamp") == 1


def _rejection_updates(queries: list[dict]) -> int:
    return sum(q["sql"].startswith("UPDATE") and "rejected_spans" in q["sql"] for q in queries)


def test_a_clean_request_does_not_touch_rejected_spans(issued_key):
    _post(issued_key, _json_request(_span("eee19b7ec3c1b173")))  # warm up
    with CaptureQueriesContext(connection) as clean:
        _post(issued_key, _json_request(_span("eee19b7ec3c1b174", trace_id=OTHER_TRACE)))
    assert _rejection_updates(clean.captured_queries) == 0
    with CaptureQueriesContext(connection) as messy:
        _post(issued_key, _json_request(_span("eee19b7ec3c1b175", trace_id=OTHER_TRACE),
                                        _span("eee19b7ec3c1b176", trace_id=OTHER_TRACE, start="x",
                                              endTimeUnixNano=None)))
    # One upsert of the project's counters and one UPDATE of the trace.
    assert len(messy.captured_queries) <= len(clean.captured_queries) + 2
    assert _rejection_updates(messy.captured_queries) == 1


@pytest.mark.parametrize("span, reason, trace_id", [
    (_span("eee19b7ec3c1b175", start="abc", endTimeUnixNano=None), "invalid_timestamp", TRACE),
    (_span("eee19b7ec3c1b175", trace_id="0" * 32), "invalid_trace_id", ""),
    ({"traceId": TRACE.upper(), "name": "x"}, "invalid_span_id", TRACE),
    (_span("eee19b7ec3c1b175", parentSpanId="abc"), "invalid_parent_span_id", TRACE),
], ids=["time", "trace-id", "span-id", "parent"])
def test_json_rejections_carry_reason_and_trace_id(span, reason, trace_id):
    [rejection] = decode_export_request(body=_json_request(span).encode(), content_type="application/json").rejected
    assert (rejection.index, rejection.reason, rejection.trace_id) == (0, reason, trace_id)


# --- OTLP/protobuf -------------------------------------------------------------------------------------------------


def _pb_request(*spans: dict) -> trace_service_pb2.ExportTraceServiceRequest:
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    for span in spans:
        scope_spans.spans.add(**span)
    return request


def _pb_span(span_id: str, *, trace_id: str = TRACE, start: int = START) -> dict:
    return {"trace_id": bytes.fromhex(trace_id), "span_id": bytes.fromhex(span_id), "name": "step",
            "start_time_unix_nano": start, "end_time_unix_nano": END if start == START else 0}


def test_protobuf_rejections_count_on_their_trace(project, issued_key):
    body = _pb_request(_pb_span("eee19b7ec3c1b173"), _pb_span("eee19b7ec3c1b174"),
                       _pb_span("eee19b7ec3c1b175", start=2**63 + 5),  # out of range, no end to fall back on
                       {"trace_id": bytes(16), "span_id": bytes.fromhex("eee19b7ec3c1b176"), "name": "zero",
                        "start_time_unix_nano": START}).SerializeToString()
    assert _post(issued_key, body, "application/x-protobuf") == 2
    assert Trace.objects.get(project=project, trace_id=TRACE).rejected_spans == 1
    assert _rejected(project, "invalid_timestamp") == 1 and _rejected(project, "invalid_trace_id") == 1
    assert _api_trace(issued_key)["rejected_spans"] == 1


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_a_protobuf_span_that_cannot_be_decoded_still_names_its_trace(project, issued_key):
    good = _pb_request(_pb_span("eee19b7ec3c1b173")).resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    bad = _field(1, bytes.fromhex(TRACE)) + _field(5, b"\xff\xfe not utf-8")  # Span.name must be UTF-8
    body = _field(1, _field(2, _field(2, good) + _field(2, bad)))
    assert _post(issued_key, body, "application/x-protobuf") == 1
    assert Trace.objects.get(project=project, trace_id=TRACE).rejected_spans == 1
    assert _rejected(project, "undecodable_span") == 1
    [rejection] = decode_export_request(body=body, content_type="application/x-protobuf").rejected
    assert (rejection.reason, rejection.trace_id) == ("undecodable_span", TRACE)


# --- Langfuse ------------------------------------------------------------------------------------------------------


def _langfuse(key, events: list[dict]):
    auth = "Basic " + base64.b64encode(f"{key.api_key.public_key}:{key.secret}".encode()).decode()
    response = Client().post("/api/public/ingestion", data=json.dumps({"batch": events}),
                             content_type="application/json", HTTP_AUTHORIZATION=auth)
    assert response.status_code == 207
    return response.json()


def _observation(event_id: str, body: dict, etype: str = "span-create") -> dict:
    return {"id": event_id, "type": etype, "timestamp": "2024-01-01T00:00:00Z",
            "body": {"startTime": "2024-01-01T00:00:00Z", **body}}


def test_langfuse_refused_events_count_on_their_trace(project, issued_key):
    body = _langfuse(issued_key, [
        _observation("e1", {"id": "obs-1", "traceId": "lf-trace", "name": "good"}),
        _observation("e2", {"id": "obs-2", "traceId": "lf-trace", "name": "good too"}),
        _observation("e3", {"id": "obs-3", "traceId": "lf-trace", "startTime": "yesterday-ish"}),
        _observation("e4", {"id": "obs-4", "traceId": 42}),  # no usable trace id
        _observation("e5", {"id": "obs-5", "traceId": "lf-unknown", "startTime": "nope"}),  # a trace never stored
        {"id": "e6", "type": "score-create", "body": {"traceId": "lf-trace", "name": "q", "value": None}},  # no span
    ])
    assert sorted(e["id"] for e in body["errors"]) == ["e3", "e4", "e5", "e6"]
    trace_id = langfuse_trace_id("lf-trace")
    assert Trace.objects.get(project=project, trace_id=trace_id).rejected_spans == 1
    assert not Trace.objects.filter(project=project, trace_id=langfuse_trace_id("lf-unknown")).exists()
    assert _rejected(project, "invalid_langfuse_event") == 4
    assert _api_trace(issued_key, trace_id)["rejected_spans"] == 1


def test_langfuse_rejections_carry_the_trace_they_name():
    batch = normalize_ingestion_batch(payload={"batch": [
        {"id": "t", "type": "trace-create", "body": {"id": "lf-trace", "timestamp": "never"}},
        _observation("o", {"id": "obs", "traceId": " lf-trace ", "endTime": "never"}, etype="generation-update"),
        _observation("n", {"id": "obs-n", "startTime": "never"}),  # its own trace, which cannot exist yet
        "not an event",
    ]})
    assert len(batch.rejected) == len(batch.errors) == 4
    assert [(r.index, r.reason, r.trace_id) for r in batch.rejected] == [
        (0, "invalid_langfuse_event", langfuse_trace_id("lf-trace")),
        (1, "invalid_langfuse_event", langfuse_trace_id("lf-trace")),
        (2, "invalid_langfuse_event", ""),
        (3, "invalid_langfuse_event", ""),
    ]
    assert [r.message for r in batch.rejected] == [e["message"] for e in batch.errors]


# --- File import ---------------------------------------------------------------------------------------------------


def test_an_imported_request_with_a_rejected_span_counts_on_its_trace(project, tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text(_json_request(_span("eee19b7ec3c1b173"), _span("eee19b7ec3c1b175", start="abc",
                                                                   endTimeUnixNano=None)) + "\n")
    summary = traces_import(project=project, path=path)
    assert summary.spans_rejected == 1
    assert Trace.objects.get(project=project, trace_id=TRACE).rejected_spans == 1
