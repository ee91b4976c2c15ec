"""The traps real OTLP/JSON payloads set, handled by general rules (never per fixture)."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

from traces.normalize import decode_export_request, resolve_nodes

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"
PARENT = "eee19b7ec3c1b173"


def _decode(*spans, resource=None, scope="s"):
    doc = {"resourceSpans": [{"resource": {"attributes": resource or []},
                              "scopeSpans": [{"scope": {"name": scope}, "spans": list(spans)}]}]}
    batch = decode_export_request(body=json.dumps(doc).encode(), content_type="application/json")
    assert batch.rejected == []
    return batch.spans


def _span(**kw):
    base = {"traceId": TRACE, "spanId": SPAN, "name": "s", "startTimeUnixNano": "1700000000000000000"}
    base.update(kw)
    return base


def _kv(key, value):
    return {"key": key, "value": value}


def test_ids_in_every_encoding():
    tid, sid = bytes.fromhex(TRACE), bytes.fromhex(SPAN)
    forms = [
        (TRACE.upper(), SPAN.upper()),
        (base64.b64encode(tid).decode(), base64.b64encode(sid).decode()),
        (base64.b64encode(tid).decode().rstrip("="), base64.b64encode(sid).decode().rstrip("=")),
        (base64.urlsafe_b64encode(tid).decode(), base64.urlsafe_b64encode(sid).decode()),
        (list(tid), list(sid)),
        ({"type": "Buffer", "data": list(tid)}, {"type": "Buffer", "data": list(sid)}),
        ({str(i): b for i, b in enumerate(tid)}, {str(i): b for i, b in enumerate(sid)}),
    ]
    for t, s in forms:
        (span,) = _decode(_span(traceId=t, spanId=s, parentSpanId=base64.b64encode(bytes.fromhex(PARENT)).decode()))
        assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, SPAN, PARENT), (t, s)


def test_snake_case_keys_and_root_markers():
    (span,) = _decode({"trace_id": TRACE, "span_id": SPAN, "parent_span_id": "", "name": "x",
                       "start_time_unix_nano": 1700000000000000000})
    assert span.is_root and span.parent_span_id is None
    (span,) = _decode(_span(parentSpanId="0000000000000000"))
    assert span.is_root


def test_enum_names_instead_of_integers():
    spans = _decode(
        _span(kind="SPAN_KIND_CLIENT", status={"code": "STATUS_CODE_ERROR", "message": "boom"}),
        _span(spanId="eee19b7ec3c1b175", kind="SPAN_KIND_INTERNAL", status={"code": "STATUS_CODE_OK"}),
        _span(spanId="eee19b7ec3c1b176", status={"code": "2"}),
        _span(spanId="eee19b7ec3c1b177", status={}),
    )
    assert [s.status for s in spans] == ["error", "ok", "error", "unset"]
    assert spans[0].status_message == "boom"


def test_64_bit_numbers_as_long_objects_strings_and_numbers():
    ns = 1_738_074_845_669_299_666
    long_obj = {"low": ns & 0xFFFFFFFF, "high": ns >> 32}
    if long_obj["low"] >= 2**31:
        long_obj["low"] -= 2**32  # protobufjs Long stores signed 32-bit halves
    (span,) = _decode(_span(
        startTimeUnixNano=long_obj,
        endTimeUnixNano=ns + 1_000_000_000,
        attributes=[
            _kv("max_tokens", {"intValue": {"low": -1, "high": -1}}),
            _kv("n", {"intValue": 7}),
            _kv("big", {"intValue": "9223372036854775807"}),
            _kv("gen_ai.usage.input_tokens", {"stringValue": "174"}),
            _kv("gen_ai.usage.output_tokens", {"doubleValue": 31.0}),
        ],
    ))
    assert span.start_time == datetime.fromtimestamp(ns // 1000 / 1e6, tz=timezone.utc).replace(
        microsecond=(ns // 1000) % 1_000_000)
    assert (span.end_time - span.start_time).total_seconds() == 1.0
    assert span.attributes["max_tokens"] == -1
    assert span.attributes["n"] == 7 and span.attributes["big"] == 2**63 - 1
    assert (span.input_tokens, span.output_tokens) == (174, 31)


def test_nan_and_infinity_doubles_stay_json_able():
    body = (
        '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"%s","spanId":"%s","name":"x",'
        '"startTimeUnixNano":"1","attributes":['
        '{"key":"a","value":{"doubleValue":"NaN"}},{"key":"b","value":{"doubleValue":"Infinity"}},'
        '{"key":"c","value":{"doubleValue":"-Infinity"}},{"key":"d","value":{"doubleValue":NaN}},'
        '{"key":"e","value":{"doubleValue":1}}]}]}]}]}' % (TRACE, SPAN)
    ).encode()
    (span,) = decode_export_request(body=body, content_type="application/json").spans
    assert span.attributes == {"a": "NaN", "b": "Infinity", "c": "-Infinity", "d": "NaN", "e": 1.0}
    json.dumps(span.attributes, allow_nan=False)


def test_array_kvlist_bytes_and_bare_values():
    (span,) = _decode(_span(attributes=[
        _kv("arr", {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "2"}, {"boolValue": True}]}}),
        _kv("kv", {"kvlistValue": {"values": [_kv("x", {"doubleValue": 1.5}),
                                              _kv("y", {"arrayValue": {"values": []}})]}}),
        _kv("raw", {"bytesValue": base64.b64encode(b"\x00\x01").decode()}),
        _kv("bare", "plain"),
        _kv("empty", {}),
        {"value": {"stringValue": "no key"}},
    ]))
    assert span.attributes["arr"] == ["a", 2, True]
    assert span.attributes["kv"] == {"x": 1.5, "y": []}
    assert span.attributes["raw"] == "AAE="
    assert span.attributes["bare"] == "plain"
    assert span.attributes["empty"] is None
    assert len(span.attributes) == 5


def test_values_json_encoded_inside_strings_once_and_twice():
    once = json.dumps([{"role": "user", "content": "hi"}])
    twice = json.dumps(once)
    (span,) = _decode(_span(attributes=[
        _kv("langfuse.observation.type", {"stringValue": "generation"}),
        _kv("langfuse.observation.input", {"stringValue": twice}),
        _kv("langfuse.observation.output", {"stringValue": once}),
        _kv("langfuse.observation.metadata.note", {"stringValue": json.dumps("text")}),
        _kv("langfuse.observation.usage_details", {"stringValue": json.dumps(json.dumps({"input": 10, "output": 2}))}),
    ]))
    assert span.input == [{"role": "user", "content": "hi"}]
    assert span.output == [{"role": "user", "content": "hi"}]
    assert span.metadata["note"] == "text"
    assert (span.input_tokens, span.output_tokens) == (10, 2)
    assert span.attributes["langfuse.observation.input"] == twice  # raw attributes are kept as sent


def test_prompt_and_input_tokens_on_one_span_are_not_double_counted():
    (span,) = _decode(_span(attributes=[
        _kv("gen_ai.request.model", {"stringValue": "gpt-4o"}),
        _kv("gen_ai.usage.prompt_tokens", {"intValue": "100"}),
        _kv("gen_ai.usage.input_tokens", {"intValue": "100"}),
        _kv("gen_ai.usage.completion_tokens", {"intValue": "20"}),
        _kv("gen_ai.usage.output_tokens", {"intValue": "20"}),
        _kv("llm.token_count.prompt", {"intValue": "100"}),
        _kv("gen_ai.usage.prompt_tokens_details.cached_tokens", {"intValue": "60"}),
    ]))
    assert (span.input_tokens, span.output_tokens, span.cached_tokens) == (100, 20, 60)
    assert span.kind == "LLM" and not span.usage_is_aggregate


def test_missing_times():
    (span,) = _decode({"traceId": TRACE, "spanId": SPAN, "name": "x", "endTimeUnixNano": "1700000000000000000"})
    assert span.start_time == span.end_time
    (span,) = _decode({"traceId": TRACE, "spanId": SPAN, "name": "x"})
    assert span.start_time.tzinfo is not None and span.end_time is None


def test_exception_events_and_event_times():
    (span,) = _decode(_span(status={"code": 2}, events=[
        {"timeUnixNano": "1700000000500000000", "name": "exception", "attributes": [
            _kv("exception.type", {"stringValue": "ValueError"}),
            _kv("exception.message", {"stringValue": "bad input"}),
            _kv("exception.stacktrace", {"stringValue": "Traceback ..."})]},
        {"name": "note"},
    ]))
    assert span.exceptions == [{"type": "ValueError", "message": "bad input", "stacktrace": "Traceback ..."}]
    assert span.status == "error" and span.status_message == "ValueError: bad input"
    assert span.events[0]["time"] == "2023-11-14T22:13:20.500000Z"
    assert span.events[1] == {"name": "note", "time": None, "attributes": {}}


def test_agent_name_on_llm_span_names_its_node_and_never_makes_it_an_agent():
    spans = _decode(
        _span(spanId=PARENT, name="invoke_agent triage", attributes=[
            _kv("gen_ai.operation.name", {"stringValue": "invoke_agent"})]),
        _span(name="chat gpt-4o", parentSpanId=PARENT, attributes=[
            _kv("gen_ai.operation.name", {"stringValue": "chat"}),
            _kv("gen_ai.agent.name", {"stringValue": "writer"})]),
    )
    resolve_nodes(spans)
    agent, llm = spans
    assert (agent.kind, agent.node, agent.agent_name) == ("AGENT", "triage", "triage")
    assert (llm.kind, llm.node) == ("LLM", "writer")


def test_resource_context_and_clear_attributes():
    (span,) = _decode(
        _span(attributes=[
            _kv("clear.outcome", {"stringValue": "FAILURE"}),
            _kv("clear.score", {"doubleValue": 0.25}),
            _kv("clear.task.id", {"stringValue": "q-17"}),
            _kv("deployment.environment.name", {"stringValue": "prod"}),
            _kv("tag.tags", {"stringValue": '["a", "b"]'}),
            _kv("langfuse.trace.tags", {"arrayValue": {"values": [{"stringValue": "b"}, {"stringValue": "c"}]}}),
            _kv("user.id", {"stringValue": "u-9"}),
        ]),
        resource=[_kv("service.version", {"stringValue": "2.0.1"}),
                  _kv("deployment.environment", {"stringValue": "staging"}),
                  _kv("session.id", {"stringValue": "sess"})],
    )
    assert (span.outcome, span.score, span.task_id) == ("failure", 0.25, "q-17")
    assert (span.release, span.environment, span.session_id, span.user_id) == ("2.0.1", "prod", "sess", "u-9")
    assert span.tags == ["b", "c", "a"]
    assert span.resource["service.version"] == "2.0.1"
    (span,) = _decode(_span(attributes=[_kv("clear.score", {"doubleValue": 3.0}),
                                        _kv("clear.outcome", {"stringValue": "maybe"})]))
    assert span.score is None and span.outcome is None


def test_out_of_range_times_do_not_break_the_batch():
    # Issue 24: a start that means nothing is set to a valid end (recorded) or, without one, rejects only its span.
    doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "s"}, "spans": [
        _span(startTimeUnixNano="99999999999999999999999", endTimeUnixNano="1700000000000000000",
              events=[{"timeUnixNano": "-5", "name": "e"}]),
        _span(spanId="eee19b7ec3c1b175", startTimeUnixNano={"low": 0, "high": -2147483648}),
    ]}]}]}
    batch = decode_export_request(body=json.dumps(doc).encode(), content_type="application/json")
    spans = batch.spans
    assert spans[0].start_time == spans[0].end_time
    assert spans[0].metadata["clear.repairs"][0]["field"] == "start_time"
    assert spans[0].events[0]["time"] is None
    assert [r.index for r in batch.rejected] == [1]
    assert "negative" in batch.rejected[0].message


def test_memoryview_and_bytearray_bodies():
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [_span()]}]}]}
    raw = json.dumps(doc).encode()
    for body in (memoryview(raw), bytearray(raw)):
        assert len(decode_export_request(body=body, content_type="application/json").spans) == 1


def test_utf8_bom_is_tolerated():
    raw = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [_span()]}]}]}).encode()
    assert len(decode_export_request(body=b"\xef\xbb\xbf" + raw, content_type="application/json").spans) == 1
