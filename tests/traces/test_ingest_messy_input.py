"""Issue 24: what real instrumentations send (long names, NUL, lone surrogates, deep nesting, wrong clocks,
duplicates) never fails the other spans of its request: each input here answered 500 (or was rewritten in silence)
before, and now gets a 200 with partialSuccess (OTLP JSON and protobuf) or a 207 with per-event entries (Langfuse),
with the good span of the same request readable through /api/v1/traces/{id}/."""

import base64
import json

import pytest
from django.test import Client
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework.test import APIClient

from traces.normalize.values import langfuse_trace_id

pytestmark = pytest.mark.django_db

TRACE = "5b8efff798038103d269b633813fc60c"
GOOD, BAD, OTHER = "eee19b7ec3c1b173", "eee19b7ec3c1b174", "eee19b7ec3c1b175"
START, END = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000
DEEP = 10_000


def _attr(key: str, value: dict) -> dict:
    return {"key": key, "value": value}


def _span(span_id: str, *, name: str = "step", attributes: list | None = None, start: object = str(START),
          end: object = str(END)) -> dict:
    span = {"traceId": TRACE, "spanId": span_id, "name": name, "attributes": attributes or []}
    if start is not None:
        span["startTimeUnixNano"] = start
    if end is not None:
        span["endTimeUnixNano"] = end
    return span


def _json_body(*spans: dict) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "app"}, "spans": list(spans)}]}]})


def _post(key, body, content_type: str = "application/json"):
    return Client().post("/v1/traces", data=body, content_type=content_type,
                         HTTP_AUTHORIZATION=f"Bearer {key.secret}")


def _partial(response) -> tuple[int, str]:
    assert response.status_code == 200, response.content[:500]
    if response["Content-Type"].startswith("application/x-protobuf"):
        partial = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content).partial_success
        return partial.rejected_spans, partial.error_message
    partial = response.json().get("partialSuccess", {})
    return int(partial.get("rejectedSpans", 0)), partial.get("errorMessage", "")


def _api_spans(key, trace_id: str = TRACE) -> dict[str, dict]:
    response = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}").get(f"/api/v1/traces/{trace_id}/")
    assert response.status_code == 200
    return {span["span_id"]: span for span in response.json()["spans"]}


def _deep_json_any(kind: str) -> str:
    """A JSON AnyValue nested DEEP levels (kvlistValue or arrayValue), as text: json.dumps would recurse."""
    if kind == "kvlist":
        head, tail = '{"kvlistValue": {"values": [{"key": "k", "value": ', "}]}}"
    else:
        head, tail = '{"arrayValue": {"values": [', "]}}"
    return head * DEEP + '{"stringValue": "bottom"}' + tail * DEEP


# --- OTLP/JSON: repairs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, field, reason", [
    (_span(BAD, name="n" * 10_000), "name", "truncated"),
    (_span(BAD, name="x" * 301, attributes=[_attr("gen_ai.operation.name", {"stringValue": "execute_tool"}),
                                             _attr("gen_ai.tool.name", {"stringValue": "t" * 5000})]),
     "tool_name", "truncated"),
    (_span(BAD, attributes=[_attr("gen_ai.agent.name", {"stringValue": "a" * 301})]), "agent_name", "truncated"),
    (_span(BAD, attributes=[_attr("gen_ai.request.model", {"stringValue": "m" * 301})]), "model", "truncated"),
    (_span(BAD, name="nul\x00name"), "name", "nul_removed"),
    (_span(BAD, attributes=[_attr("tool.output", {"stringValue": "out\x00put"})]), "attributes", "nul_removed"),
], ids=["long-name", "long-tool-name", "long-agent-name", "long-model", "nul-in-name", "nul-in-attribute"])
def test_json_bad_values_are_repaired_and_the_batch_kept(issued_key, bad, field, reason):
    rejected, message = _partial(_post(issued_key, _json_body(_span(GOOD, name="good"), bad)))
    assert rejected == 0
    assert "repairs" in message and BAD in message
    spans = _api_spans(issued_key)
    assert spans[GOOD]["name"] == "good"
    repairs = spans[BAD]["repairs"]
    assert {"field": field, "reason": reason} in [{"field": r["field"], "reason": r["reason"]} for r in repairs]
    assert "\x00" not in json.dumps(spans[BAD])
    assert len(spans[BAD]["name"]) <= 500 and len(spans[BAD]["node"]) <= 300


def test_json_lone_surrogates_are_replaced(issued_key):
    body = _json_body(_span(GOOD, name="good"), _span(BAD, name="cut-SURROGATE",
                                                      attributes=[_attr("text", {"stringValue": "a-SURROGATE"})]))
    rejected, message = _partial(_post(issued_key, body.replace("SURROGATE", "\\ud800")))
    assert rejected == 0 and "lone surrogate" in message
    spans = _api_spans(issued_key)
    assert spans[BAD]["name"] == "cut-\ufffd"
    assert {r["field"] for r in spans[BAD]["repairs"]} >= {"name", "attributes"}
    assert GOOD in spans


@pytest.mark.parametrize("kind", ["kvlist", "array"])
def test_json_deep_attribute_only_affects_its_span(issued_key, kind):
    deep = f'{{"key": "deep", "value": {_deep_json_any(kind)}}}'
    body = _json_body(_span(GOOD, name="good"), _span(BAD, name="deep", attributes=[]))
    body = body.replace('"name": "deep", "attributes": []', f'"name": "deep", "attributes": [{deep}]')
    rejected, message = _partial(_post(issued_key, body))
    assert rejected == 0 and "nested too deep" in message
    spans = _api_spans(issued_key)
    assert spans[GOOD]["name"] == "good"
    assert "nested_too_deep" in {r["reason"] for r in spans[BAD]["repairs"]}


def test_json_body_that_is_entirely_too_deep_is_a_400(issued_key):
    response = _post(issued_key, '{"resourceSpans": ' + "[" * DEEP + "]" * DEEP + "}")
    assert response.status_code == 400


# --- OTLP/JSON: times ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, words", [("-1", "negative"), ("abc", "not a number"), (str(2**70), "out of range"),
                                          (str(2**64 - 1), "out of range")],
                         ids=["negative", "not-a-number", "2^70", "2^64-1"])
def test_json_start_that_means_nothing_rejects_only_its_span(issued_key, start, words):
    rejected, message = _partial(_post(issued_key, _json_body(_span(GOOD, name="good"),
                                                              _span(BAD, name="bad", start=start, end=None))))
    assert rejected == 1
    assert "startTimeUnixNano" in message and words in message and "'bad'" in message
    assert set(_api_spans(issued_key)) == {GOOD}


def test_json_bad_start_with_a_good_end_is_set_to_the_end(issued_key):
    rejected, message = _partial(_post(issued_key, _json_body(_span(GOOD), _span(BAD, start="-1"))))
    assert rejected == 0 and "start time negative" in message
    span = _api_spans(issued_key)[BAD]
    assert span["start_time"] == span["end_time"]


def test_json_end_before_start_is_repaired_and_reported(issued_key):
    rejected, message = _partial(_post(issued_key, _json_body(_span(GOOD), _span(BAD, start=str(END), end=str(START)))))
    assert rejected == 0 and "end before start" in message
    span = _api_spans(issued_key)[BAD]
    assert span["end_time"] == span["start_time"]
    assert span["repairs"][0]["field"] == "end_time"


# --- duplicates ----------------------------------------------------------------------------------------------------


def test_duplicates_in_one_request_last_copy_wins_and_is_reported(issued_key):
    rejected, message = _partial(_post(issued_key, _json_body(_span(GOOD), _span(BAD, name="first"),
                                                              _span(BAD, name="second"))))
    assert rejected == 0 and "1 duplicate span" in message
    assert _api_spans(issued_key)[BAD]["name"] == "second"


def test_a_resend_with_different_content_updates_the_stored_span(issued_key):
    _post(issued_key, _json_body(_span(GOOD), _span(BAD, name="first")))
    rejected, message = _partial(_post(issued_key, _json_body(
        _span(BAD, name="second", attributes=[_attr("gen_ai.request.model", {"stringValue": "gpt-4o"})]))))
    assert rejected == 0 and "updated by this resend" in message
    span = _api_spans(issued_key)[BAD]
    assert (span["name"], span["model"]) == ("second", "gpt-4o")


def test_an_identical_resend_says_nothing(issued_key):
    body = _json_body(_span(GOOD), _span(BAD, name="first"))
    _post(issued_key, body)
    assert _partial(_post(issued_key, body)) == (0, "")


# --- OTLP protobuf -------------------------------------------------------------------------------------------------


def _pb_request(*, name: str = "bad", attributes: dict | None = None, start: int = START, end: int = END) -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    scope_spans.scope.name = "app"
    for span_id, span_name, attrs, s, e in ((GOOD, "good", {}, START, END), (BAD, name, attributes or {}, start, end)):
        span = scope_spans.spans.add(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(span_id), name=span_name,
                                     start_time_unix_nano=s, end_time_unix_nano=e)
        for key, value in attrs.items():
            span.attributes.add(key=key).value.string_value = value
    return request.SerializeToString()


@pytest.mark.parametrize("kwargs, reason", [
    ({"name": "n" * 10_000}, "truncated"),
    ({"name": "nul\x00name"}, "nul_removed"),
    ({"attributes": {"tool.output": "out\x00put"}}, "nul_removed"),
    ({"attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t" * 1000}}, "truncated"),
], ids=["long-name", "nul-in-name", "nul-in-attribute", "long-tool-name"])
def test_protobuf_bad_values_are_repaired_and_the_batch_kept(issued_key, kwargs, reason):
    rejected, message = _partial(_post(issued_key, _pb_request(**kwargs), "application/x-protobuf"))
    assert rejected == 0 and "repairs" in message
    spans = _api_spans(issued_key)
    assert spans[GOOD]["name"] == "good"
    assert reason in {r["reason"] for r in spans[BAD]["repairs"]}


@pytest.mark.parametrize("start, end, rejected_count", [(2**64 - 1, 0, 1), (END, START, 0)],
                         ids=["2^64-1", "end-before-start"])
def test_protobuf_times_are_rejected_or_repaired(issued_key, start, end, rejected_count):
    rejected, message = _partial(_post(issued_key, _pb_request(start=start, end=end), "application/x-protobuf"))
    assert rejected == rejected_count and message
    assert GOOD in _api_spans(issued_key)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_protobuf_deep_attribute_only_affects_its_span(issued_key):
    value = _field(1, b"bottom")  # AnyValue.string_value
    for _ in range(DEEP // 10):  # upb refuses anything past 100 levels: 1,000 is as bad as 10,000
        key_value = _field(1, b"k") + _field(2, value)  # KeyValue{key, value}
        value = _field(6, _field(1, key_value))  # AnyValue.kvlist_value = KeyValueList{values}
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_pb_request())
    raw_span = request.resource_spans[0].scope_spans[0].spans[1].SerializeToString()
    deep_span = raw_span + _field(9, _field(1, b"deep") + _field(2, value))  # Span.attributes
    scope = _field(1, _field(1, b"app")) + _field(2, request.resource_spans[0].scope_spans[0].spans[0]
                                                  .SerializeToString()) + _field(2, deep_span)
    body = _field(1, _field(1, b"") + _field(2, scope))
    rejected, message = _partial(_post(issued_key, body, "application/x-protobuf"))
    assert rejected == 0 and "attributes nested too deep" in message
    spans = _api_spans(issued_key)
    assert spans[GOOD]["name"] == "good"
    assert spans[BAD]["repairs"][0]["field"] == "attributes"
    from traces.models import Span

    assert "nested deeper" in Span.objects.get(span_id=BAD).attributes["deep"]


def _deep_pb_value() -> bytes:
    value = _field(1, b"bottom")  # AnyValue.string_value
    for _ in range(DEEP // 10):  # upb refuses anything past 100 levels: 1,000 is as bad as 10,000
        value = _field(6, _field(1, _field(1, b"k") + _field(2, value)))  # kvlist_value{values: [KeyValue{k, v}]}
    return value


@pytest.mark.parametrize("where", ["resource", "scope"])
def test_protobuf_deep_resource_or_scope_attribute_only_affects_its_spans(issued_key, where):
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_pb_request())
    good, bad = (span.SerializeToString() for span in request.resource_spans[0].scope_spans[0].spans)
    deep = _field(1, b"deep") + _field(2, _deep_pb_value())  # KeyValue
    plain = _field(1, b"service.name") + _field(2, _field(1, b"svc"))
    if where == "resource":  # Resource.attributes (1)
        resource, scope = _field(1, plain) + _field(1, deep), _field(1, b"app")
    else:  # InstrumentationScope.attributes (3)
        resource, scope = _field(1, plain), _field(1, b"app") + _field(3, deep)
    deep_resource = _field(1, resource) + _field(2, _field(1, scope) + _field(2, bad))  # ResourceSpans
    clean_resource = _field(2, _field(1, _field(1, b"app")) + _field(2, good))
    body = _field(1, clean_resource) + _field(1, deep_resource)
    rejected, message = _partial(_post(issued_key, body, "application/x-protobuf"))
    assert rejected == 0 and f"{where} nested too deep" in message
    spans = _api_spans(issued_key)
    assert spans[GOOD]["name"] == "good" and not spans[GOOD]["repairs"]
    assert {"field": where, "reason": "nested_too_deep"} in [
        {"field": r["field"], "reason": r["reason"]} for r in spans[BAD]["repairs"]]
    from traces.models import Span

    stored = Span.objects.get(span_id=BAD)
    assert stored.resource["service.name"] == "svc"
    if where == "resource":
        assert "nested deeper" in stored.resource["deep"]


def test_protobuf_resource_attribute_that_is_not_utf8_is_replaced_on_its_spans(issued_key):
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_pb_request())
    scope = _field(1, _field(1, b"app")) + b"".join(
        _field(2, span.SerializeToString()) for span in request.resource_spans[0].scope_spans[0].spans)
    bad = _field(1, b"host.name") + _field(2, _field(1, b"\xff\xfe"))  # AnyValue.string_value must be UTF-8
    body = _field(1, _field(1, _field(1, bad)) + _field(2, scope))
    rejected, message = _partial(_post(issued_key, body, "application/x-protobuf"))
    assert rejected == 0 and "resource undecodable value" in message
    spans = _api_spans(issued_key)
    assert {r["reason"] for r in spans[GOOD]["repairs"]} == {"undecodable_value"}
    from traces.models import Span

    assert "not decodable" in Span.objects.get(span_id=BAD).resource["host.name"]


def test_protobuf_span_that_cannot_be_decoded_rejects_only_itself(issued_key):
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_pb_request())
    good = request.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    bad = _field(5, b"\xff\xfe not utf-8")  # Span.name must be UTF-8
    scope = _field(2, good) + _field(2, bad)
    rejected, message = _partial(_post(issued_key, _field(1, _field(2, scope)), "application/x-protobuf"))
    assert rejected == 1 and "span 1" in message
    assert set(_api_spans(issued_key)) == {GOOD}


# --- Langfuse ingestion --------------------------------------------------------------------------------------------


def _langfuse(key, events: list[dict]):
    auth = "Basic " + base64.b64encode(f"{key.api_key.public_key}:{key.secret}".encode()).decode()
    return Client().post("/api/public/ingestion", data=json.dumps({"batch": events}),
                         content_type="application/json", HTTP_AUTHORIZATION=auth)


def _langfuse_event(event_id: str, body: dict) -> dict:
    return {"id": event_id, "type": "span-create", "timestamp": "2024-01-01T00:00:00Z",
            "body": {"traceId": "lf-trace", "startTime": "2024-01-01T00:00:00Z", **body}}


@pytest.mark.parametrize("bad", [
    {"name": "n" * 10_000},
    {"name": "nul\x00name", "input": {"text": "a\x00b"}},
    {"name": "surrogate", "input": "cut \ud800"},
], ids=["long-name", "nul", "lone-surrogate"])
def test_langfuse_bad_values_are_repaired_and_reported_per_event(issued_key, bad):
    response = _langfuse(issued_key, [_langfuse_event("e-good", {"id": "obs-good", "name": "good"}),
                                      _langfuse_event("e-bad", {"id": "obs-bad", **bad})])
    assert response.status_code == 207
    body = response.json()
    assert [e["id"] for e in body["errors"]] == ["e-bad"] and "repairs" in body["errors"][0]["message"]
    spans = {span["name"]: span for span in _api_spans(issued_key, langfuse_trace_id("lf-trace")).values()}
    assert "good" in spans
    assert [span["repairs"] for name, span in spans.items() if name != "good" and span["repairs"]]


def test_langfuse_deep_input_only_affects_its_event(issued_key):
    good = json.dumps(_langfuse_event("e-good", {"id": "obs-good", "name": "good"}))
    bad = json.dumps(_langfuse_event("e-bad", {"id": "obs-bad", "name": "deep", "input": "DEEP"}))
    bad = bad.replace('"DEEP"', "[" * DEEP + "]" * DEEP)
    auth = "Basic " + base64.b64encode(f"{issued_key.api_key.public_key}:{issued_key.secret}".encode()).decode()
    response = Client().post("/api/public/ingestion", data='{"batch": [' + good + ", " + bad + "]}",
                             content_type="application/json", HTTP_AUTHORIZATION=auth)
    assert response.status_code == 207
    assert [e["id"] for e in response.json()["errors"]] == ["e-bad"]
    spans = {span["name"]: span for span in _api_spans(issued_key, langfuse_trace_id("lf-trace")).values()}
    assert "good" in spans
    assert "nested_too_deep" in {r["reason"] for r in spans["deep"]["repairs"]}


def test_the_trace_view_shows_the_repairs(issued_key, project, owner):
    _post(issued_key, _json_body(_span(GOOD, name="good"), _span(BAD, name="n" * 10_000)))
    client = Client()
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/traces/{TRACE}/?span={BAD}").content.decode()
    assert "Repaired at ingestion" in page and "was 10000 characters" in page
