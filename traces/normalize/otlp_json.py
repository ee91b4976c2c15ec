"""OTLP/JSON trace exports -> SpanRecords.

The JSON is walked directly, never through `json_format.Parse`, which would base64-decode the hex ids into 24-byte
ids. Both the camelCase names of the OTLP/JSON encoding and the snake_case ones of hand-rolled exporters are read;
a structural problem raises OtlpDecodeError with the JSON path of the offending value. Used by
otlp.decode_export_request.
"""

from __future__ import annotations

from typing import Any

from .context import resource_context
from .deep_json import TooDeep, loads_bounded
from .mapping import build_span_record
from .otlp_errors import (
    INVALID_JSON,
    INVALID_STRUCTURE,
    LOGS_MESSAGE,
    LOGS_NOT_TRACES,
    METRICS_MESSAGE,
    METRICS_NOT_TRACES,
    OtlpDecodeError,
    compression_hint,
)
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
from .values import clean_float, id_from_json, ns_to_iso, to_int

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


def _j_array(x: Any) -> list | str:
    values = x.get("values") if isinstance(x, dict) else x
    if isinstance(values, str):
        return values  # nested too deep, kept as text by loads_bounded
    if not isinstance(values, list):
        return []
    return [_j_any(i) for i in values]


def _j_kvlist(x: Any) -> dict | str:
    values = x.get("values") if isinstance(x, dict) else x
    if isinstance(values, str):
        return values  # nested too deep, kept as text by loads_bounded
    if isinstance(values, dict):
        return {k: _j_any(v) for k, v in values.items()}
    if not isinstance(values, list):
        return {}
    out = {}
    for kv in values:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = _j_any(kv.get("value"))
        elif isinstance(kv, str):
            out[f"[{len(out)}]"] = kv  # nested too deep, kept as text by loads_bounded
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


def decode_json(body: bytes | str) -> OtlpBatch:
    """Decode an OTLP/JSON `ExportTraceServiceRequest` (already decompressed)."""
    try:
        doc = loads_bounded(body)
    except TooDeep as exc:
        raise OtlpDecodeError(f"{exc} Nothing in it can be told apart as a span.", INVALID_JSON) from None
    except UnicodeDecodeError:
        hint = compression_hint(body) if isinstance(body, (bytes, bytearray)) else ""
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
            raise OtlpDecodeError(LOGS_MESSAGE, LOGS_NOT_TRACES)
        if "resourceMetrics" in doc or "resource_metrics" in doc:
            raise OtlpDecodeError(METRICS_MESSAGE, METRICS_NOT_TRACES)
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
                    rejected.append(SpanRejection(index=idx, message=f"span {idx} ({name[:80]!r}): traceId {why}",
                                                  reason=INVALID_TRACE_ID))
                    idx += 1
                    continue
                sid, why = id_from_json(_g(sp, "spanId", "span_id"), 8)
                if sid is None or sid == "0" * 16:
                    why = why or ("is all zeros" if sid else "is missing")
                    rejected.append(SpanRejection(index=idx, message=f"span {idx} ({name[:80]!r}): spanId {why}",
                                                  reason=INVALID_SPAN_ID, trace_id=tid))
                    idx += 1
                    continue
                pid, why = id_from_json(_g(sp, "parentSpanId", "parent_span_id"), 8)
                if why is not None:
                    rejected.append(SpanRejection(index=idx,
                                                  message=f"span {idx} ({name[:80]!r}): parentSpanId {why}",
                                                  reason=INVALID_PARENT_SPAN_ID, trace_id=tid))
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
                times = check_times(start=_g(sp, "startTimeUnixNano", "start_time_unix_nano"),
                                    end=_g(sp, "endTimeUnixNano", "end_time_unix_nano"))
                if times.rejected:
                    rejected.append(SpanRejection(index=idx, message=f"span {idx} ({name[:80]!r}): {times.rejected}",
                                                  reason=INVALID_TIMESTAMP, trace_id=tid))
                    idx += 1
                    continue
                events = sp.get("events")
                links = sp.get("links")
                record = build_span_record(
                    trace_id=tid,
                    span_id=sid,
                    parent_span_id=pid,
                    name=name,
                    attributes=_j_attrs(sp.get("attributes"), f"{p_sp}.attributes"),
                    events=_j_events(events, f"{p_sp}.events") if events else [],
                    status_code=code,
                    status_message=message,
                    start_ns=times.start_ns,
                    end_ns=times.end_ns,
                    resource=resource,
                    scope=scope,
                    links=_j_links(links, f"{p_sp}.links") if links else None,
                    resource_ctx=resource_ctx,
                )
                note_repairs(record, times.repairs)
                spans.append(record)
                idx += 1
    return batch
