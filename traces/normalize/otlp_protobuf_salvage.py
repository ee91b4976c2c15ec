"""A protobuf export that upb refuses as a whole (a value nested past its depth limit of 100) taken apart span by
span, so one span's deep attribute affects only that span.

Used only when the whole request failed to parse. The request is walked on the wire: each resource, scope and span
is parsed on its own; an attribute, event or link that still fails is replaced (an attribute keeps its key, with a
text saying how many bytes were dropped) and the repair recorded, a resource's or scope's on each of its spans.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from .records import UNDECODABLE_SPAN, SpanRejection

_LEN = 2
# The fields that hold nested values, with the message each holds and the SpanRecord field a repair names: a span's
# attributes (9), events (11), links (13); a resource's attributes (1); a scope's attributes (3).
_SPAN_NESTED = {9: (KeyValue, "attributes"), 11: (Span.Event, "events"), 13: (Span.Link, "links")}
_RESOURCE_NESTED = {1: (KeyValue, "resource")}
_SCOPE_NESTED = {3: (KeyValue, "scope")}
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


def _failure(exc: Exception) -> tuple[str, str]:
    """(repair reason, words for the placeholder): upb names its depth limit (MaxDepth); anything else (a string
    that is not UTF-8, a truncated field) is only known to be undecodable."""
    text = str(exc).lower()
    if "depth" in text or "nest" in text or "recursion" in text:
        return "nested_too_deep", "nested deeper than protobuf allows"
    return "undecodable_value", "not decodable as protobuf"


def _repair_message(raw: bytes, *, message_type: type,
                    nested: dict[int, tuple[type, str]]) -> tuple[Any, list[dict]]:
    """The message with the nested values it cannot hold replaced (an attribute keeps its key, anything else is
    dropped); raises Unsalvageable if it still fails."""
    kept, repairs = [], []
    for number, wire, encoded in _fields(raw):
        message, field = nested.get(number, (None, "")) if wire == _LEN else (None, "")
        if message is not None:
            payload = _payload(encoded)
            try:
                message.FromString(payload)
            except _PARSE_ERRORS as exc:
                reason, why = _failure(exc)
                repairs.append({"field": field, "reason": reason, "original_length": len(payload)})
                if message is not KeyValue:
                    continue
                key = next((_payload(e) for n, w, e in _fields(payload) if n == 1 and w == _LEN), b"")
                replacement = KeyValue(key=key.decode("utf-8", "replace"))
                replacement.value.string_value = f"[{why}: {len(payload)} bytes not kept]"
                tag = bytes([number << 3 | _LEN])
                body = replacement.SerializeToString()
                encoded = tag + _encode_varint(len(body)) + body
        kept.append(encoded)
    try:
        return message_type.FromString(b"".join(kept)), repairs
    except _PARSE_ERRORS as exc:
        raise Unsalvageable(str(exc)) from None


def _parse(raw: bytes, *, message_type: type, nested: dict[int, tuple[type, str]]) -> tuple[Any, list[dict]]:
    try:
        return message_type.FromString(raw), []
    except _PARSE_ERRORS:
        return _repair_message(raw, message_type=message_type, nested=nested)


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _trace_id(raw: bytes) -> str:
    """The trace id (field 1) of a span that cannot be decoded, when the bytes before the damage hold a usable one:
    its trace then shows that a span is missing."""
    found = ""
    try:
        for number, wire, encoded in _fields(raw):
            if number == 1 and wire == _LEN:
                value = _payload(encoded)
                found = value.hex() if len(value) == 16 and any(value) else ""
    except Unsalvageable:
        pass
    return found


def _share(repairs: dict[int, list[dict]], shared: list[dict], *, start: int, end: int, broken: dict) -> None:
    """A resource's or scope's repair is recorded on each of its spans: they all store the repaired value. Applied
    once the resource or scope is read, since its fields may come after its spans on the wire."""
    if shared:
        for index in range(start, end):
            if index not in broken:
                repairs[index] = [*shared, *repairs.get(index, [])]


def salvage(body: bytes) -> tuple[ExportTraceServiceRequest, dict[int, list[dict]], dict[int, SpanRejection]]:
    """(the request rebuilt from what parses, repairs by span index, rejections by index of spans left out as empty
    placeholders). Raises Unsalvageable when the failure is outside the spans."""
    request = ExportTraceServiceRequest()
    repairs: dict[int, list[dict]] = {}
    broken: dict[int, SpanRejection] = {}
    index = 0
    try:
        for number, wire, encoded in _fields(body):
            if number != 1 or wire != _LEN:
                continue
            resource_spans = request.resource_spans.add()
            resource_repairs: list[dict] = []
            resource_start = index
            for rs_number, rs_wire, rs_encoded in _fields(_payload(encoded)):
                if rs_number == 1 and rs_wire == _LEN:
                    resource, resource_repairs = _parse(_payload(rs_encoded), message_type=Resource,
                                                        nested=_RESOURCE_NESTED)
                    resource_spans.resource.MergeFrom(resource)
                    continue
                if rs_number != 2 or rs_wire != _LEN:
                    resource_spans.MergeFromString(rs_encoded)
                    continue
                scope_spans = resource_spans.scope_spans.add()
                scope_repairs: list[dict] = []
                scope_start = index
                for ss_number, ss_wire, ss_encoded in _fields(_payload(rs_encoded)):
                    if ss_number == 1 and ss_wire == _LEN:
                        scope, scope_repairs = _parse(_payload(ss_encoded), message_type=InstrumentationScope,
                                                      nested=_SCOPE_NESTED)
                        scope_spans.scope.MergeFrom(scope)
                        continue
                    if ss_number != 2 or ss_wire != _LEN:
                        scope_spans.MergeFromString(ss_encoded)
                        continue
                    raw = _payload(ss_encoded)
                    try:
                        span, span_repairs = _parse(raw, message_type=Span, nested=_SPAN_NESTED)
                        if span_repairs:
                            repairs[index] = span_repairs
                    except Unsalvageable as exc:
                        span = Span()
                        broken[index] = SpanRejection(
                            index=index, message=f"span {index}: cannot be decoded ({exc})",
                            reason=UNDECODABLE_SPAN, trace_id=_trace_id(raw))
                    scope_spans.spans.append(span)
                    index += 1
                _share(repairs, scope_repairs, start=scope_start, end=index, broken=broken)
            _share(repairs, resource_repairs, start=resource_start, end=index, broken=broken)
    except _PARSE_ERRORS as exc:
        raise Unsalvageable(str(exc)) from None
    if not index:
        raise Unsalvageable("no spans")
    return request, repairs, broken

