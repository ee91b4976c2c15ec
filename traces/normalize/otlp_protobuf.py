"""OTLP/HTTP protobuf trace exports -> SpanRecords: the generated `ExportTraceServiceRequest` walked field by field
(no MessageToDict). Used by otlp.decode_export_request.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .context import resource_context
from .mapping import build_span_record
from .otlp_errors import (
    INVALID_PROTOBUF,
    LOGS_MESSAGE,
    LOGS_NOT_TRACES,
    METRICS_MESSAGE,
    METRICS_NOT_TRACES,
    OtlpDecodeError,
    compression_hint,
)
from .otlp_protobuf_salvage import Unsalvageable, salvage
from .records import (
    INVALID_PARENT_SPAN_ID,
    INVALID_SPAN_ID,
    INVALID_TIMESTAMP,
    INVALID_TRACE_ID,
    OtlpBatch,
    SpanRejection,
)
from .repair import note_repairs
from .span_times import check_times
from .values import clean_float, ns_to_iso

_INF = math.inf


def _pb_any(v) -> Any:
    w = v.WhichOneof("value")
    if w == "string_value":
        return v.string_value
    if w == "int_value":
        return v.int_value
    if w == "bool_value":
        return v.bool_value
    if w == "double_value":
        x = v.double_value
        if x != x or x == _INF or x == -_INF:
            return clean_float(x)
        return x
    if w == "array_value":
        return [_pb_any(i) for i in v.array_value.values]
    if w == "kvlist_value":
        return {kv.key: _pb_any(kv.value) for kv in v.kvlist_value.values}
    if w == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return None


def _pb_attrs(kvs) -> dict:
    out = {}
    for kv in kvs:
        v = kv.value
        w = v.WhichOneof("value")
        if w == "string_value":
            out[kv.key] = v.string_value
        elif w == "int_value":
            out[kv.key] = v.int_value
        else:
            out[kv.key] = _pb_any(v)
    return out


def _pb_events(events) -> list[dict]:
    out = []
    for ev in events:
        t = ev.time_unix_nano
        out.append(
            {
                "name": ev.name,
                "time": ns_to_iso(t),
                "attributes": _pb_attrs(ev.attributes),
            }
        )
    return out


def _pb_links(links) -> list[dict]:
    return [
        {"trace_id": ln.trace_id.hex(), "span_id": ln.span_id.hex(), "attributes": _pb_attrs(ln.attributes)}
        for ln in links
    ]


_ZERO16 = bytes(16)
_ZERO8 = bytes(8)


def _id_problem(tid: bytes, sid: bytes) -> tuple[str, str]:
    """(reason code, what is wrong) for ids that failed the decoder's check: the last case is the only one left."""
    if not tid:
        return INVALID_TRACE_ID, "traceId is missing"
    if len(tid) != 16:
        return INVALID_TRACE_ID, f"traceId has {len(tid)} bytes, expected 16"
    if tid == _ZERO16:
        return INVALID_TRACE_ID, "traceId is all zeros"
    if not sid:
        return INVALID_SPAN_ID, "spanId is missing"
    if len(sid) != 8:
        return INVALID_SPAN_ID, f"spanId has {len(sid)} bytes, expected 8"
    return INVALID_SPAN_ID, "spanId is all zeros"


def _raise_if_json(body: bytes) -> None:
    # Only consulted once protobuf parsing has failed: a valid export may well start with 0x0a 0x7b ("\n{").
    if body.lstrip(b" \t\r\n")[:1] in (b"{", b"["):
        raise OtlpDecodeError(
            "The body looks like JSON but Content-Type says protobuf: send it with 'Content-Type: application/json'.",
            INVALID_PROTOBUF,
        )


def decode_protobuf(body: bytes) -> OtlpBatch:
    """Decode a protobuf `ExportTraceServiceRequest` (already decompressed)."""
    req = ExportTraceServiceRequest()
    span_repairs: dict[int, list[dict]] = {}
    broken: dict[int, SpanRejection] = {}
    try:
        req.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        try:
            req, span_repairs, broken = salvage(body)
        except Unsalvageable:
            pass
        else:
            return _decode_request(req, body, span_repairs=span_repairs, broken=broken)
        _raise_if_json(body)
        _raise_if_other_signal(body)
        raise OtlpDecodeError(
            "The body is not a valid protobuf ExportTraceServiceRequest (garbage or truncated: "
            f"{exc}). Send the complete, uncompressed body of an OTLP trace export.{compression_hint(body)}",
            INVALID_PROTOBUF,
        ) from None
    if body and not len(req.resource_spans):
        _raise_if_json(body)
        _raise_if_other_signal(body)
        raise OtlpDecodeError(
            "The protobuf body holds no resourceSpans (field 1): it is not an ExportTraceServiceRequest."
            + compression_hint(body),
            INVALID_PROTOBUF,
        )
    return _decode_request(req, body, span_repairs=span_repairs, broken=broken)


def _decode_request(req: ExportTraceServiceRequest, body: bytes, *, span_repairs: dict[int, list[dict]],
                    broken: dict[int, SpanRejection]) -> OtlpBatch:
    batch = OtlpBatch()
    spans = batch.spans
    rejected = batch.rejected
    idx = 0
    for rs in req.resource_spans:
        resource = _pb_attrs(rs.resource.attributes)
        resource_ctx = resource_context(resource)
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for sp in ss.spans:
                if broken and idx in broken:
                    rejected.append(broken[idx])
                    idx += 1
                    continue
                tid = sp.trace_id
                sid = sp.span_id
                if len(tid) != 16 or len(sid) != 8 or tid == _ZERO16 or sid == _ZERO8:
                    reason, why = _id_problem(tid, sid)
                    trace_id = "" if reason == INVALID_TRACE_ID else tid.hex()
                    rejected.append(SpanRejection(index=idx, message=f"span {idx} ({sp.name[:80]!r}): {why}",
                                                  reason=reason, trace_id=trace_id))
                    idx += 1
                    continue
                pid = sp.parent_span_id
                if len(pid) == 8 and pid != _ZERO8:
                    parent = pid.hex()
                else:
                    parent = None
                    if pid and pid != _ZERO8:
                        why = f"parentSpanId has {len(pid)} bytes, expected 8"
                        rejected.append(SpanRejection(index=idx, message=f"span {idx} ({sp.name[:80]!r}): {why}",
                                                      reason=INVALID_PARENT_SPAN_ID, trace_id=tid.hex()))
                        idx += 1
                        continue
                times = check_times(start=sp.start_time_unix_nano, end=sp.end_time_unix_nano)
                if times.rejected:
                    rejected.append(SpanRejection(index=idx,
                                                  message=f"span {idx} ({sp.name[:80]!r}): {times.rejected}",
                                                  reason=INVALID_TIMESTAMP, trace_id=tid.hex()))
                    idx += 1
                    continue
                st = sp.status
                record = build_span_record(
                    trace_id=tid.hex(),
                    span_id=sid.hex(),
                    parent_span_id=parent,
                    name=sp.name,
                    attributes=_pb_attrs(sp.attributes),
                    events=_pb_events(sp.events) if len(sp.events) else [],
                    status_code=st.code,
                    status_message=st.message,
                    start_ns=times.start_ns,
                    end_ns=times.end_ns,
                    resource=resource,
                    scope=scope,
                    links=_pb_links(sp.links) if len(sp.links) else None,
                    resource_ctx=resource_ctx,
                )
                note_repairs(record, times.repairs + span_repairs.get(idx, []) if span_repairs else times.repairs)
                spans.append(record)
                idx += 1
    if rejected and not spans:
        _raise_if_other_signal(body)
    return batch


def _raise_if_other_signal(body: bytes) -> None:
    """Logs and metrics share field numbers with traces, so they decode as spans without ids (or fail to decode).
    Re-read the body as the other signals and name the right endpoint when one of them fits."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    try:
        logs = ExportLogsServiceRequest.FromString(body)
    except Exception:  # noqa: BLE001 - any parse failure just means "not logs"
        logs = None
    if logs is not None:
        for rl in logs.resource_logs:
            for sl in rl.scope_logs:
                for rec in sl.log_records:
                    if rec.time_unix_nano or rec.observed_time_unix_nano:
                        raise OtlpDecodeError(LOGS_MESSAGE, LOGS_NOT_TRACES)
    try:
        metrics = ExportMetricsServiceRequest.FromString(body)
    except Exception:  # noqa: BLE001
        metrics = None
    if metrics is not None:
        for rm in metrics.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    data = metric.WhichOneof("data")
                    if metric.name and data and len(getattr(metric, data).data_points):
                        raise OtlpDecodeError(METRICS_MESSAGE, METRICS_NOT_TRACES)
