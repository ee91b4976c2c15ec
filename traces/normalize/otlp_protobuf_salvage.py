"""A protobuf export that upb refuses as a whole (a value nested past its depth limit of 100) taken apart span by
span, so one span's deep attribute affects only that span.

Used only when the whole request failed to parse. The request is walked on the wire: resource and scope messages
are parsed as they are; each span is parsed on its own; an attribute, event or link that still fails is replaced
(an attribute keeps its key, with a text saying how many bytes were dropped) and the repair recorded.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

_LEN = 2
# Span fields that hold nested values: attributes (9), events (11), links (13), with the message each holds.
_NESTED = {9: KeyValue, 11: Span.Event, 13: Span.Link}
_PARSE_ERRORS = (DecodeError, ValueError, RuntimeError)


class Unsalvageable(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Unsalvageable("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(field number, wire type, the field's whole encoding) for each field of a message."""
    pos = 0
    while pos < len(buf):
        start = pos
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == _LEN:
            length, pos = _varint(buf, pos)
            pos += length
        else:
            raise Unsalvageable(f"wire type {wire}")
        if pos > len(buf):
            raise Unsalvageable("truncated field")
        yield number, wire, buf[start:pos]


def _payload(encoded: bytes) -> bytes:
    _, pos = _varint(encoded, 0)
    _, pos = _varint(encoded, pos)
    return encoded[pos:]


def _repair_span(raw: bytes) -> tuple[Span, list[dict]]:
    """The span with the nested values it cannot hold replaced; raises Unsalvageable if it still fails."""
    kept, repairs = [], []
    for number, wire, encoded in _fields(raw):
        message = _NESTED.get(number) if wire == _LEN else None
        if message is not None:
            payload = _payload(encoded)
            try:
                message.FromString(payload)
            except _PARSE_ERRORS:
                field = {9: "attributes", 11: "events", 13: "links"}[number]
                repairs.append({"field": field, "reason": "nested_too_deep", "original_length": len(payload)})
                if number != 9:
                    continue
                key = next((_payload(e) for n, w, e in _fields(payload) if n == 1 and w == _LEN), b"")
                replacement = KeyValue(key=key.decode("utf-8", "replace"))
                replacement.value.string_value = (
                    f"[nested deeper than protobuf allows: {len(payload)} bytes not kept]")
                tag = bytes([number << 3 | _LEN])
                body = replacement.SerializeToString()
                encoded = tag + _encode_varint(len(body)) + body
        kept.append(encoded)
    try:
        return Span.FromString(b"".join(kept)), repairs
    except _PARSE_ERRORS as exc:
        raise Unsalvageable(str(exc)) from None


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def salvage(body: bytes) -> tuple[ExportTraceServiceRequest, dict[int, list[dict]], dict[int, str]]:
    """(the request rebuilt from what parses, repairs by span index, reasons by index of spans left out as empty
    placeholders). Raises Unsalvageable when the failure is outside the spans."""
    request = ExportTraceServiceRequest()
    repairs: dict[int, list[dict]] = {}
    broken: dict[int, str] = {}
    index = 0
    try:
        for number, wire, encoded in _fields(body):
            if number != 1 or wire != _LEN:
                continue
            resource_spans = request.resource_spans.add()
            for rs_number, rs_wire, rs_encoded in _fields(_payload(encoded)):
                if rs_number != 2 or rs_wire != _LEN:
                    resource_spans.MergeFromString(rs_encoded)
                    continue
                scope_spans = resource_spans.scope_spans.add()
                for ss_number, ss_wire, ss_encoded in _fields(_payload(rs_encoded)):
                    if ss_number != 2 or ss_wire != _LEN:
                        scope_spans.MergeFromString(ss_encoded)
                        continue
                    raw = _payload(ss_encoded)
                    try:
                        span = Span.FromString(raw)
                    except _PARSE_ERRORS:
                        try:
                            span, repairs[index] = _repair_span(raw)
                        except Unsalvageable as exc:
                            span, broken[index] = Span(), f"span {index}: cannot be decoded ({exc})"
                    scope_spans.spans.append(span)
                    index += 1
    except _PARSE_ERRORS as exc:
        raise Unsalvageable(str(exc)) from None
    if not index:
        raise Unsalvageable("no spans")
    return request, repairs, broken

