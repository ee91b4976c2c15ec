import gzip
import json

import pytest
from django.test import Client, override_settings
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from traces.models import Span
from traces.receivers import InFlightLimit
from tests.traces.otlp_helpers import agent_run_spans, to_json, to_protobuf

pytestmark = pytest.mark.django_db


def _post(key, body, content_type="application/json", **headers):
    return Client().post("/v1/traces", data=body, content_type=content_type,
                         HTTP_AUTHORIZATION=f"Bearer {key.secret}", **headers)


def _message(response) -> str:
    if response["Content-Type"].startswith("application/x-protobuf"):
        return status_pb2.Status.FromString(response.content).message
    return response.json()["message"]


@pytest.mark.parametrize(
    "body, content_type, words",
    [
        (b"\x00\xffnot protobuf at all\x13\x37", "application/x-protobuf", "protobuf"),
        (to_protobuf(agent_run_spans())[:-7], "application/x-protobuf", "protobuf"),
        (b'{"resourceSpans": [', "application/json", "JSON"),
    ],
    ids=["garbage", "truncated-protobuf", "invalid-json"],
)
def test_undecodable_bodies_get_400_and_keep_nothing(issued_key, body, content_type, words):
    response = _post(issued_key, body, content_type)
    assert response.status_code == 400
    assert words.lower() in _message(response).lower()
    assert Span.objects.count() == 0


@pytest.mark.parametrize("signal, endpoint", [("resourceLogs", "/v1/logs"), ("resourceMetrics", "/v1/metrics")])
def test_logs_or_metrics_sent_to_traces_get_400_naming_the_right_endpoint(issued_key, signal, endpoint):
    body = json.dumps({signal: [{"resource": {}, "scopeLogs" if signal == "resourceLogs" else "scopeMetrics": []}]})
    response = _post(issued_key, body.encode())
    assert response.status_code == 400
    assert endpoint in _message(response)
    assert Span.objects.count() == 0


def test_protobuf_logs_sent_to_traces_get_400(issued_key):
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.logs.v1 import logs_pb2

    request = logs_service_pb2.ExportLogsServiceRequest()
    scope_logs = request.resource_logs.add().scope_logs.add()
    scope_logs.scope.name = "app"
    scope_logs.log_records.add(time_unix_nano=1, severity_text="INFO").body.string_value = "hello"
    assert isinstance(scope_logs.log_records[0], logs_pb2.LogRecord)
    response = _post(issued_key, request.SerializeToString(), "application/x-protobuf")
    assert response.status_code == 400
    assert "/v1/logs" in _message(response)


def test_attributes_as_an_object_get_400(issued_key):
    body = json.loads(to_json(agent_run_spans()))
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = {"gen_ai.operation.name": "chat"}
    response = _post(issued_key, json.dumps(body).encode())
    assert response.status_code == 400
    assert "attributes" in _message(response)
    assert "list" in _message(response).lower() or "array" in _message(response).lower()
    assert Span.objects.count() == 0


@pytest.mark.parametrize("encoding", ["json", "protobuf"])
def test_spans_with_missing_or_bad_ids_are_rejected_and_the_rest_kept(issued_key, encoding):
    body = json.loads(to_json(agent_run_spans()))
    spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    del spans[0]["spanId"]
    spans[1]["traceId"] = "abcd"
    if encoding == "json":
        response = _post(issued_key, json.dumps(body).encode())
        partial = response.json()["partialSuccess"]
        rejected, message = int(partial["rejectedSpans"]), partial["errorMessage"]
    else:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(to_protobuf(agent_run_spans()))
        pb_spans = request.resource_spans[0].scope_spans[0].spans
        pb_spans[0].span_id = b""
        pb_spans[1].trace_id = b"\x01\x02"
        response = _post(issued_key, request.SerializeToString(), "application/x-protobuf")
        decoded = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
        rejected, message = decoded.partial_success.rejected_spans, decoded.partial_success.error_message
    assert response.status_code == 200
    assert rejected == 2
    assert "span" in message.lower() and "id" in message.lower()
    assert Span.objects.count() == 2


@override_settings(CLEAR_INGEST_MAX_BODY_BYTES=2048)
def test_a_body_over_the_cap_gets_413(issued_key):
    response = _post(issued_key, b"{" + b" " * 4096 + b"}")
    assert response.status_code == 413
    assert "CLEAR_INGEST_MAX_BODY_BYTES" in _message(response)
    assert Span.objects.count() == 0


@override_settings(CLEAR_INGEST_MAX_BODY_BYTES=64 * 1024)
def test_a_gzip_bomb_gets_413_without_inflating_it_all(issued_key, monkeypatch):
    bomb = gzip.compress(b"{" + b" " * (50 * 1024 * 1024) + b"}", compresslevel=9)
    assert len(bomb) < 64 * 1024
    import zlib

    inflated = []
    real = zlib.decompressobj

    def tracking_decompressobj(*args, **kwargs):
        inflater = real(*args, **kwargs)

        class Tracking:
            unconsumed_tail = b""

            def decompress(self, data, max_length=0):
                out = inflater.decompress(data, max_length)
                inflated.append(len(out))
                Tracking.unconsumed_tail = inflater.unconsumed_tail
                return out

        return Tracking()

    monkeypatch.setattr("traces.receivers.zlib.decompressobj", tracking_decompressobj)
    response = _post(issued_key, bomb, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert sum(inflated) <= 64 * 1024 + 1
    assert Span.objects.count() == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", ""])
def test_wrong_or_missing_content_type_gets_415(issued_key, content_type):
    response = Client().post("/v1/traces", data=to_json(agent_run_spans()), content_type=content_type,
                             HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert response.status_code == 415
    assert "application/x-protobuf" in response.json()["message"]
    assert Span.objects.count() == 0


@override_settings(CLEAR_INGEST_MAX_IN_FLIGHT=1)
def test_overload_gets_503_with_retry_after(issued_key):
    with InFlightLimit():  # another request is being served
        response = _post(issued_key, to_json(agent_run_spans()))
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    assert "retry" in _message(response).lower()
    assert Span.objects.count() == 0
    assert _post(issued_key, to_json(agent_run_spans())).status_code == 200
