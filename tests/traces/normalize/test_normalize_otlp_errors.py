"""Bodies that cannot be used raise OtlpDecodeError with a kind and a message that says what to fix; spans with
missing or malformed ids are rejected one by one while the valid ones are kept."""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from traces.normalize import ERROR_KINDS, OtlpDecodeError, decode_export_request

PB = "application/x-protobuf"
JS = "application/json"


def _err(body, content_type) -> OtlpDecodeError:
    with pytest.raises(OtlpDecodeError) as info:
        decode_export_request(body=body, content_type=content_type)
    assert info.value.kind in ERROR_KINDS
    assert str(info.value) == info.value.message
    return info.value


def _trace_request(n: int = 3) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "svc"
    ss = rs.scope_spans.add()
    ss.scope.name = "scope"
    for i in range(n):
        sp = ss.spans.add(name=f"span {i}", trace_id=bytes(range(1, 17)), span_id=bytes([9, 9, 9, 9, 9, 9, 9, i + 1]))
        sp.start_time_unix_nano = 1_700_000_000_000_000_000 + i
        sp.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    return req


def test_unsupported_content_type():
    for ct in ("text/plain", "", "application/octet-stream", "application/x-www-form-urlencoded"):
        err = _err(b"{}", ct)
        assert err.kind == "unsupported_media_type"
        assert "application/x-protobuf" in err.message and "application/json" in err.message


def test_content_type_parameters_and_case_are_accepted():
    body = _trace_request(1).SerializeToString()
    assert len(decode_export_request(body=body, content_type="Application/X-Protobuf; charset=binary").spans) == 1
    assert decode_export_request(body=b"{}", content_type="application/json; charset=UTF-8").spans == []


def test_empty_requests_are_fine():
    assert decode_export_request(body=b"", content_type=PB).spans == []
    assert decode_export_request(body=b'{"resourceSpans": []}', content_type=JS).spans == []


def test_garbage_protobuf():
    err = _err(b"garbage \x00\xff\xfe not protobuf at all", PB)
    assert err.kind == "invalid_protobuf"
    assert "not a valid protobuf ExportTraceServiceRequest" in err.message


def test_truncated_protobuf_at_every_length():
    body = _trace_request(3).SerializeToString()
    for cut in range(1, len(body)):
        err = _err(body[:cut], PB)
        assert err.kind == "invalid_protobuf", cut
        assert "truncated" in err.message


def test_gzip_body_without_content_encoding_gets_a_hint():
    body = gzip.compress(_trace_request(1).SerializeToString())
    assert "Content-Encoding: gzip" in _err(body, PB).message
    assert "Content-Encoding: gzip" in _err(gzip.compress(b'{"resourceSpans": []}'), JS).message


def test_json_sent_as_protobuf_and_protobuf_sent_as_json():
    err = _err(b'{"resourceSpans": []}', PB)
    assert err.kind == "invalid_protobuf" and "application/json" in err.message
    err = _err(_trace_request(1).SerializeToString(), JS)
    assert err.kind == "invalid_json" and "application/x-protobuf" in err.message


def test_invalid_json():
    err = _err(b'{"resourceSpans": [{"scopeSpans": [', JS)
    assert err.kind == "invalid_json"
    assert "line 1 column" in err.message
    assert _err(b"\xff\xfe{}", JS).kind == "invalid_json"
    assert _err(b"[1, 2]", JS).kind == "invalid_structure"
    assert _err(b'{"resourceSpans": {"oops": 1}}', JS).kind == "invalid_structure"
    err = _err(b'{"batch": []}', JS)
    assert "/api/public/ingestion" in err.message
    err = _err(b'{"spans": []}', JS)
    assert err.kind == "invalid_structure" and "resourceSpans" in err.message


def test_json_logs_and_metrics_name_the_right_endpoint():
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "x"}}]}]}]}
    err = _err(json.dumps(logs).encode(), JS)
    assert err.kind == "logs_not_traces" and "/v1/logs" in err.message
    err = _err(json.dumps({"resourceMetrics": [{"scopeMetrics": []}]}).encode(), JS)
    assert err.kind == "metrics_not_traces" and "/v1/metrics" in err.message


def _logs_request(with_ids: bool) -> bytes:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="service.name").value.string_value = "svc"
    sl = rl.scope_logs.add()
    sl.scope.name = "app.logger"
    for i in range(3):
        rec = sl.log_records.add(
            time_unix_nano=1_700_000_000_000_000_000 + i,
            observed_time_unix_nano=1_700_000_000_000_000_000 + i,
            severity_number=9,
            severity_text="INFO",
        )
        rec.body.string_value = f"user logged in {i}"
        rec.attributes.add(key="user").value.string_value = "u1"
        if with_ids:
            rec.trace_id = bytes(range(16))
            rec.span_id = bytes(range(8))
    return req.SerializeToString()


@pytest.mark.parametrize("with_ids", [False, True])
def test_protobuf_logs_to_traces_endpoint(with_ids):
    err = _err(_logs_request(with_ids), PB)
    assert err.kind == "logs_not_traces"
    assert "/v1/logs" in err.message


@pytest.mark.parametrize("data", ["gauge", "sum", "histogram"])
def test_protobuf_metrics_to_traces_endpoint(data):
    req = ExportMetricsServiceRequest()
    sm = req.resource_metrics.add().scope_metrics.add()
    sm.scope.name = "meter"
    metric = sm.metrics.add(name="http.server.duration", unit="ms")
    points = getattr(metric, data).data_points
    dp = points.add(time_unix_nano=1_700_000_000_000_000_000)
    if data == "histogram":
        dp.count = 2
        dp.bucket_counts.extend([1, 1])
        dp.explicit_bounds.append(1.0)
    else:
        dp.as_double = 1.5
    err = _err(req.SerializeToString(), PB)
    assert err.kind == "metrics_not_traces"
    assert "/v1/metrics" in err.message


def test_attributes_as_object():
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "x",
        "attributes": {"gen_ai.request.model": "gpt-4o"}}]}]}]}
    err = _err(json.dumps(doc).encode(), JS)
    assert err.kind == "invalid_structure"
    assert "resourceSpans[0].scopeSpans[0].spans[0].attributes" in err.message
    assert '"key"' in err.message  # shows the expected KeyValue shape
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = []
    doc["resourceSpans"][0]["resource"] = {"attributes": {"service.name": "svc"}}
    assert "resourceSpans[0].resource.attributes" in _err(json.dumps(doc).encode(), JS).message


def test_json_spans_without_ids_or_with_wrong_length_ids_are_rejected_and_valid_kept():
    good = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "good"}
    spans = [
        {"name": "no ids"},
        dict(good, name="short trace", traceId="0af7651916cd43dd"),
        good,
        dict(good, name="bad span", spanId="b7ad6b71692033"),
        dict(good, name="zero trace", traceId="0" * 32),
        dict(good, name="not hex", spanId="zzzzzzzzzzzzzzzz"),
        dict(good, name="bad parent", spanId="b7ad6b7169203332", parentSpanId="abc"),
        dict(good, name="also good", spanId="b7ad6b7169203333", parentSpanId="B7AD6B7169203331"),
    ]
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    batch = decode_export_request(body=body, content_type=JS)
    assert [s.name for s in batch.spans] == ["good", "also good"]
    assert batch.spans[1].parent_span_id == "b7ad6b7169203331"
    assert [r.index for r in batch.rejected] == [0, 1, 3, 4, 5, 6]
    reasons = {r.index: r.message for r in batch.rejected}
    assert reasons[0] == "span 0 ('no ids'): traceId is missing"
    assert "expected 16" in reasons[1]
    assert "expected 8" in reasons[3]
    assert "all zeros" in reasons[4]
    assert "parentSpanId" in reasons[6]


def test_protobuf_spans_without_ids_are_rejected_and_valid_kept():
    req = _trace_request(2)
    ss = req.resource_spans[0].scope_spans[0]
    ss.spans.add(name="no ids")
    ss.spans.add(name="short", trace_id=b"\x01" * 8, span_id=b"\x02" * 8)
    ss.spans.add(name="bad parent", trace_id=b"\x01" * 16, span_id=b"\x02" * 8, parent_span_id=b"\x03" * 5)
    batch = decode_export_request(body=req.SerializeToString(), content_type=PB)
    assert [s.name for s in batch.spans] == ["span 0", "span 1"]
    assert [(r.index, r.message) for r in batch.rejected] == [
        (2, "span 2 ('no ids'): traceId is missing"),
        (3, "span 3 ('short'): traceId has 8 bytes, expected 16"),
        (4, "span 4 ('bad parent'): parentSpanId has 5 bytes, expected 8"),
    ]


def test_protobuf_batch_of_only_id_less_spans_is_not_mistaken_for_logs():
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    ss.scope.name = "hand.rolled"
    for i in range(3):
        sp = ss.spans.add(name=f"step {i}", start_time_unix_nano=1_700_000_000_000_000_000)
        sp.attributes.add(key="k").value.string_value = "v"
    batch = decode_export_request(body=req.SerializeToString(), content_type=PB)
    assert batch.spans == []
    assert [r.index for r in batch.rejected] == [0, 1, 2]


def test_protobuf_that_starts_like_json_is_still_protobuf():
    """A ResourceSpans of exactly 123 bytes encodes as 0x0a 0x7b ("\\n{"): it must not be mistaken for JSON."""
    for name_len in range(1, 120):
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.scope_spans.add().spans.add(name="x" * name_len, trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
        body = req.SerializeToString()
        if body[1:2] == b"{":
            break
    else:
        pytest.fail("could not build the case")
    batch = decode_export_request(body=body, content_type=PB)
    assert len(batch.spans) == 1
