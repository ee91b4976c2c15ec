"""Decode OTLP/HTTP trace exports (protobuf or JSON) into SpanRecords.

    batch = decode_export_request(body=raw_bytes, content_type=request.content_type)
    batch.spans      # list[SpanRecord], nodes not yet resolved (see nodes.resolve_nodes)
    batch.rejected   # [(span index in request order, reason)] for spans without valid ids

Raises `OtlpDecodeError(message, kind)` when the body as a whole cannot be used; `kind` is one of
`ERROR_KINDS`. The body must already be decompressed.

JSON is walked directly (never through `json_format.Parse`, which would base64-decode the hex ids into 24-byte
ids). Protobuf is parsed with the generated `ExportTraceServiceRequest` and walked field by field (no
MessageToDict).
"""

from __future__ import annotations

import base64
import math
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .mapping import build_span_record, resource_context
from .records import OtlpBatch
from .values import clean_float, id_from_json, loads, ns_to_iso, to_int

UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
INVALID_PROTOBUF = "invalid_protobuf"
INVALID_JSON = "invalid_json"
INVALID_STRUCTURE = "invalid_structure"
LOGS_NOT_TRACES = "logs_not_traces"
METRICS_NOT_TRACES = "metrics_not_traces"
ERROR_KINDS = (
    UNSUPPORTED_MEDIA_TYPE,  # -> HTTP 415
    INVALID_PROTOBUF,  # garbage / truncated protobuf -> 400
    INVALID_JSON,  # not UTF-8 / not JSON -> 400
    INVALID_STRUCTURE,  # valid JSON, but not an ExportTraceServiceRequest (e.g. attributes as an object) -> 400
    LOGS_NOT_TRACES,  # an OTLP logs export sent to the traces endpoint -> 400 (use /v1/logs)
    METRICS_NOT_TRACES,  # an OTLP metrics export sent to the traces endpoint -> 400 (use /v1/metrics)
)


class OtlpDecodeError(ValueError):
    """The request body cannot be decoded as an OTLP trace export. `message` says what to fix."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.message = message
        self.kind = kind

    def __repr__(self) -> str:
        return f"OtlpDecodeError({self.message!r}, kind={self.kind!r})"


_LOGS_MESSAGE = (
    "This is an OTLP logs export (resourceLogs), sent to the traces endpoint. Send logs to /v1/logs, or point the "
    "trace exporter (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) at /v1/traces."
)
_METRICS_MESSAGE = (
    "This is an OTLP metrics export (resourceMetrics), sent to the traces endpoint. Send metrics to /v1/metrics, "
    "or point the trace exporter (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) at /v1/traces."
)


def content_kind(content_type: str) -> str | None:
    """'protobuf', 'json' or None for a Content-Type header value (charset and other parameters ignored)."""
    ct = (content_type or "").split(";", 1)[0].strip().lower()
    if "protobuf" in ct:
        return "protobuf"
    if ct.endswith("json"):
        return "json"
    return None


def decode_export_request(*, body: bytes, content_type: str) -> OtlpBatch:
    """Decode an OTLP/HTTP `ExportTraceServiceRequest` (already decompressed)."""
    if not isinstance(body, (bytes, bytearray)):
        body = bytes(body)  # memoryview etc.
    kind = content_kind(content_type)
    if kind == "protobuf":
        return _decode_protobuf(bytes(body))
    if kind == "json":
        return _decode_json(body)
    raise OtlpDecodeError(
        f"Unsupported Content-Type {content_type!r}: send application/x-protobuf or application/json.",
        UNSUPPORTED_MEDIA_TYPE,
    )


def _compression_hint(body: bytes) -> str:
    if body[:2] == b"\x1f\x8b":
        return " The body is gzip-compressed: send it with 'Content-Encoding: gzip'."
    return ""


# ---------------------------------------------------------------------------------------------------------------
# protobuf

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


def _id_problem(tid: bytes, sid: bytes) -> str | None:
    if not tid:
        return "traceId is missing"
    if len(tid) != 16:
        return f"traceId has {len(tid)} bytes, expected 16"
    if tid == _ZERO16:
        return "traceId is all zeros"
    if not sid:
        return "spanId is missing"
    if len(sid) != 8:
        return f"spanId has {len(sid)} bytes, expected 8"
    if sid == _ZERO8:
        return "spanId is all zeros"
    return None


def _raise_if_json(body: bytes) -> None:
    # Only consulted once protobuf parsing has failed: a valid export may well start with 0x0a 0x7b ("\n{").
    if body.lstrip(b" \t\r\n")[:1] in (b"{", b"["):
        raise OtlpDecodeError(
            "The body looks like JSON but Content-Type says protobuf: send it with 'Content-Type: application/json'.",
            INVALID_PROTOBUF,
        )


def _decode_protobuf(body: bytes) -> OtlpBatch:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        _raise_if_json(body)
        _raise_if_other_signal(body)
        raise OtlpDecodeError(
            "The body is not a valid protobuf ExportTraceServiceRequest (garbage or truncated: "
            f"{exc}). Send the complete, uncompressed body of an OTLP trace export.{_compression_hint(body)}",
            INVALID_PROTOBUF,
        ) from None
    if body and not len(req.resource_spans):
        _raise_if_json(body)
        _raise_if_other_signal(body)
        raise OtlpDecodeError(
            "The protobuf body holds no resourceSpans (field 1): it is not an ExportTraceServiceRequest."
            + _compression_hint(body),
            INVALID_PROTOBUF,
        )

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
                tid = sp.trace_id
                sid = sp.span_id
                if len(tid) != 16 or len(sid) != 8 or tid == _ZERO16 or sid == _ZERO8:
                    rejected.append((idx, f"span {idx} ({sp.name!r}): {_id_problem(tid, sid)}"))
                    idx += 1
                    continue
                pid = sp.parent_span_id
                if len(pid) == 8 and pid != _ZERO8:
                    parent = pid.hex()
                else:
                    parent = None
                    if pid and pid != _ZERO8:
                        why = f"parentSpanId has {len(pid)} bytes, expected 8"
                        rejected.append((idx, f"span {idx} ({sp.name!r}): {why}"))
                        idx += 1
                        continue
                st = sp.status
                spans.append(
                    build_span_record(
                        trace_id=tid.hex(),
                        span_id=sid.hex(),
                        parent_span_id=parent,
                        name=sp.name,
                        attributes=_pb_attrs(sp.attributes),
                        events=_pb_events(sp.events) if len(sp.events) else [],
                        status_code=st.code,
                        status_message=st.message,
                        start_ns=sp.start_time_unix_nano,
                        end_ns=sp.end_time_unix_nano,
                        resource=resource,
                        scope=scope,
                        links=_pb_links(sp.links) if len(sp.links) else None,
                        resource_ctx=resource_ctx,
                    )
                )
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
                        raise OtlpDecodeError(_LOGS_MESSAGE, LOGS_NOT_TRACES)
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
                        raise OtlpDecodeError(_METRICS_MESSAGE, METRICS_NOT_TRACES)


# ---------------------------------------------------------------------------------------------------------------
# JSON


def _j_bool(x: Any) -> Any:
    if isinstance(x, str):
        return x.strip().lower() == "true"
    return bool(x)


def _j_double(x: Any) -> Any:
    if isinstance(x, float):
        return clean_float(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str):
        try:
            return clean_float(float(x))
        except ValueError:
            return x
    return x


def _j_array(x: Any) -> list:
    values = x.get("values") if isinstance(x, dict) else x
    if not isinstance(values, list):
        return []
    return [_j_any(i) for i in values]


def _j_kvlist(x: Any) -> dict:
    values = x.get("values") if isinstance(x, dict) else x
    if isinstance(values, dict):
        return {k: _j_any(v) for k, v in values.items()}
    if not isinstance(values, list):
        return {}
    out = {}
    for kv in values:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = _j_any(kv.get("value"))
    return out


def _j_int(x: Any) -> Any:
    n = to_int(x)
    return n if n is not None else x


_J_ANY = {
    "stringValue": lambda x: x,
    "intValue": _j_int,
    "boolValue": _j_bool,
    "doubleValue": _j_double,
    "arrayValue": _j_array,
    "kvlistValue": _j_kvlist,
    "bytesValue": lambda x: x,
    "string_value": lambda x: x,
    "int_value": _j_int,
    "bool_value": _j_bool,
    "double_value": _j_double,
    "array_value": _j_array,
    "kvlist_value": _j_kvlist,
    "bytes_value": lambda x: x,
}


def _j_any(v: Any) -> Any:
    if type(v) is dict:
        s = v.get("stringValue")
        if s is not None:
            return s
        for k, x in v.items():
            dec = _J_ANY.get(k)
            if dec is not None:
                return dec(x)
        return None
    if type(v) is float:
        return clean_float(v)
    return v  # bare scalars from hand-rolled exporters


_KV_EXAMPLE = '[{"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}}]'


def _j_attrs(lst: Any, path: str) -> dict:
    if lst is None:
        return {}
    if type(lst) is not list:
        if isinstance(lst, dict):
            raise OtlpDecodeError(
                f"{path} is a JSON object; OTLP attributes must be a list of KeyValue objects, e.g. {_KV_EXAMPLE}.",
                INVALID_STRUCTURE,
            )
        raise OtlpDecodeError(
            f"{path} must be a list of KeyValue objects, e.g. {_KV_EXAMPLE}; got {type(lst).__name__}.",
            INVALID_STRUCTURE,
        )
    out = {}
    for kv in lst:
        if type(kv) is not dict:
            raise OtlpDecodeError(
                f"{path} must hold KeyValue objects like {_KV_EXAMPLE}; found {type(kv).__name__}.", INVALID_STRUCTURE
            )
        key = kv.get("key")
        if type(key) is not str:
            continue
        v = kv.get("value")
        if type(v) is dict:
            s = v.get("stringValue")
            out[key] = s if s is not None else _j_any(v)
        else:
            out[key] = _j_any(v)
    return out


def _j_list(value: Any, path: str) -> list:
    if value is None:
        return []
    if type(value) is not list:
        raise OtlpDecodeError(f"{path} must be a JSON array, got {type(value).__name__}.", INVALID_STRUCTURE)
    return value


def _j_obj(value: Any, path: str) -> dict:
    if value is None:
        return {}
    if type(value) is not dict:
        raise OtlpDecodeError(f"{path} must be a JSON object, got {type(value).__name__}.", INVALID_STRUCTURE)
    return value


def _g(d: dict, camel: str, snake: str) -> Any:
    v = d.get(camel)
    if v is None:
        v = d.get(snake)
    return v


_STATUS_CODES = {
    "0": 0,
    "1": 1,
    "2": 2,
    "STATUS_CODE_UNSET": 0,
    "STATUS_CODE_OK": 1,
    "STATUS_CODE_ERROR": 2,
    "UNSET": 0,
    "OK": 1,
    "ERROR": 2,
}


def _j_status_code(code: Any) -> int:
    if code is None:
        return 0
    if type(code) is int:
        return code
    if isinstance(code, str):
        return _STATUS_CODES.get(code.strip().upper(), 0)
    n = to_int(code)
    return n or 0


def _j_time(value: Any) -> int:
    if value is None:
        return 0
    if type(value) is str:
        try:
            return int(value)
        except ValueError:
            from .values import parse_iso_datetime

            dt = parse_iso_datetime(value)  # hand-rolled exporters sometimes send ISO strings
            if dt is None:
                return 0
            return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000
    n = to_int(value)
    return n if n and n > 0 else 0


def _j_events(events: Any, path: str) -> list[dict]:
    out = []
    for i, ev in enumerate(_j_list(events, path)):
        ev = _j_obj(ev, f"{path}[{i}]")
        t = _j_time(_g(ev, "timeUnixNano", "time_unix_nano"))
        name = ev.get("name")
        out.append(
            {
                "name": name if isinstance(name, str) else "",
                "time": ns_to_iso(t),
                "attributes": _j_attrs(ev.get("attributes"), f"{path}[{i}].attributes"),
            }
        )
    return out


def _j_links(links: Any, path: str) -> list[dict]:
    out = []
    for i, ln in enumerate(_j_list(links, path)):
        ln = _j_obj(ln, f"{path}[{i}]")
        tid, _ = id_from_json(_g(ln, "traceId", "trace_id"), 16)
        sid, _ = id_from_json(_g(ln, "spanId", "span_id"), 8)
        attrs = _j_attrs(ln.get("attributes"), f"{path}[{i}].attributes")
        out.append({"trace_id": tid, "span_id": sid, "attributes": attrs})
    return out


def _decode_json(body: bytes | str) -> OtlpBatch:
    try:
        doc = loads(body)
    except UnicodeDecodeError:
        hint = _compression_hint(body) if isinstance(body, (bytes, bytearray)) else ""
        if not hint and isinstance(body, (bytes, bytearray)) and body[:1] == b"\n":
            hint = " It looks like protobuf: send it with 'Content-Type: application/x-protobuf'."
        raise OtlpDecodeError(f"The body is not UTF-8 text, so it cannot be OTLP/JSON.{hint}", INVALID_JSON) from None
    except ValueError as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        hint = ""
        if isinstance(body, (bytes, bytearray)) and body[:1] == b"\n":
            hint = " It looks like protobuf: send it with 'Content-Type: application/x-protobuf'."
        raise OtlpDecodeError(
            f"The body is not valid JSON{where}: {getattr(exc, 'msg', exc)}. Send a complete OTLP/JSON "
            f"ExportTraceServiceRequest ({{\"resourceSpans\": [...]}}).{hint}",
            INVALID_JSON,
        ) from None
    if type(doc) is not dict:
        raise OtlpDecodeError(
            f"The JSON body must be an object with a resourceSpans array, got a {type(doc).__name__}.",
            INVALID_STRUCTURE,
        )
    rs_list = _g(doc, "resourceSpans", "resource_spans")
    if rs_list is None:
        if "resourceLogs" in doc or "resource_logs" in doc:
            raise OtlpDecodeError(_LOGS_MESSAGE, LOGS_NOT_TRACES)
        if "resourceMetrics" in doc or "resource_metrics" in doc:
            raise OtlpDecodeError(_METRICS_MESSAGE, METRICS_NOT_TRACES)
        if not doc:
            return OtlpBatch()
        if "batch" in doc:
            raise OtlpDecodeError(
                "This looks like a Langfuse ingestion batch ({\"batch\": [...]}); send it to /api/public/ingestion.",
                INVALID_STRUCTURE,
            )
        keys = ", ".join(sorted(map(str, doc))[:5])
        raise OtlpDecodeError(
            f"The JSON body has no resourceSpans array (found keys: {keys}); expected an OTLP "
            "ExportTraceServiceRequest.",
            INVALID_STRUCTURE,
        )
    batch = OtlpBatch()
    spans = batch.spans
    rejected = batch.rejected
    idx = 0
    for i, rs in enumerate(_j_list(rs_list, "resourceSpans")):
        p_rs = f"resourceSpans[{i}]"
        rs = _j_obj(rs, p_rs)
        res = _j_obj(rs.get("resource"), f"{p_rs}.resource")
        resource = _j_attrs(res.get("attributes"), f"{p_rs}.resource.attributes")
        resource_ctx = resource_context(resource)
        for j, ss in enumerate(_j_list(_g(rs, "scopeSpans", "scope_spans"), f"{p_rs}.scopeSpans")):
            p_ss = f"{p_rs}.scopeSpans[{j}]"
            ss = _j_obj(ss, p_ss)
            scope_obj = _j_obj(ss.get("scope"), f"{p_ss}.scope")
            scope = scope_obj.get("name") or ""
            if type(scope) is not str:
                scope = str(scope)
            for k, sp in enumerate(_j_list(ss.get("spans"), f"{p_ss}.spans")):
                p_sp = f"{p_ss}.spans[{k}]"
                if type(sp) is not dict:
                    raise OtlpDecodeError(f"{p_sp} must be a JSON object, got {type(sp).__name__}.", INVALID_STRUCTURE)
                name = sp.get("name")
                if type(name) is not str:
                    name = "" if name is None else str(name)
                tid, why = id_from_json(_g(sp, "traceId", "trace_id"), 16)
                if tid is None or tid == "0" * 32:
                    why = why or ("is all zeros" if tid else "is missing")
                    rejected.append((idx, f"span {idx} ({name!r}): traceId {why}"))
                    idx += 1
                    continue
                sid, why = id_from_json(_g(sp, "spanId", "span_id"), 8)
                if sid is None or sid == "0" * 16:
                    why = why or ("is all zeros" if sid else "is missing")
                    rejected.append((idx, f"span {idx} ({name!r}): spanId {why}"))
                    idx += 1
                    continue
                pid, why = id_from_json(_g(sp, "parentSpanId", "parent_span_id"), 8)
                if why is not None:
                    rejected.append((idx, f"span {idx} ({name!r}): parentSpanId {why}"))
                    idx += 1
                    continue
                if pid == "0000000000000000":
                    pid = None
                status = sp.get("status")
                if type(status) is dict:
                    code = _j_status_code(status.get("code"))
                    message = status.get("message") or ""
                    if type(message) is not str:
                        message = str(message)
                else:
                    code, message = 0, ""
                events = sp.get("events")
                links = sp.get("links")
                spans.append(
                    build_span_record(
                        trace_id=tid,
                        span_id=sid,
                        parent_span_id=pid,
                        name=name,
                        attributes=_j_attrs(sp.get("attributes"), f"{p_sp}.attributes"),
                        events=_j_events(events, f"{p_sp}.events") if events else [],
                        status_code=code,
                        status_message=message,
                        start_ns=_j_time(_g(sp, "startTimeUnixNano", "start_time_unix_nano")),
                        end_ns=_j_time(_g(sp, "endTimeUnixNano", "end_time_unix_nano")),
                        resource=resource,
                        scope=scope,
                        links=_j_links(links, f"{p_sp}.links") if links else None,
                        resource_ctx=resource_ctx,
                    )
                )
                idx += 1
    return batch
