"""Normalise a Langfuse ingestion batch (`POST /api/public/ingestion`, research/observability.md §4.2).

    result = normalize_ingestion_batch(payload=json_body)
    result.response_body()   # the 207 body: {"successes": [{"id", "status": 201}],
                             #                "errors": [{"id", "status": 400, "message", "error"}]}
    result.spans             # SpanRecords for observations (and one synthetic root span per trace-create)
    result.updates           # SpanUpdates for observations updated without a create in this batch
    result.traces            # TraceUpdates (trace-level attributes, to merge into the trace / its root span)
    result.scores            # ScoreRecords

Semantics follow Langfuse's `processEventBatch`: each event is validated on its own (a bad event gets a 400 entry
in `errors`, the others go on); `sdk-log` is accepted and dropped; events are sorted creates first, then updates,
each by envelope timestamp, and merged per entity (`body.id`), later values winning and `metadata` merged.

Ids: Langfuse ids are arbitrary strings. Trace ids that are uuids (or 32 hex digits) keep their digits; other trace
ids and all observation ids that are not already 16 hex digits are hashed (sha256) into 32 / 16 hex digits. The
original id is kept in `attributes["langfuse.id"]`. A Langfuse trace becomes a synthetic root span (kind CHAIN,
id derived from the trace id) carrying the trace's name, input, output and context; observations without
`parentObservationId` are its children, so every Langfuse trace has exactly one root.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .context import outcome_value, score_value
from .nodes import node_fields
from .records import LangfuseBatch, ScoreRecord, SpanRecord, SpanUpdate, TraceUpdate
from .usage import cost_from_mapping, usage_from_mapping
from .values import (
    decode_jsonish,
    langfuse_observation_id,
    langfuse_root_span_id,
    langfuse_trace_id,
    parse_iso_datetime,
    to_float,
)

SCOPE = "langfuse-ingestion"


class LangfuseBatchError(ValueError):
    """The request body as a whole is unusable (no `batch` array): answer 400, not 207."""


_CREATE_KINDS = {
    "span-create": "SPAN",
    "generation-create": "LLM",
    "event-create": "EVENT",
    "agent-create": "AGENT",
    "tool-create": "TOOL",
    "chain-create": "CHAIN",
    "retriever-create": "RETRIEVER",
    "evaluator-create": "EVALUATOR",
    "embedding-create": "EMBEDDING",
    "guardrail-create": "GUARDRAIL",
}
_UPDATE_TYPES = {
    "span-update",
    "generation-update",
    "agent-update",
    "tool-update",
    "chain-update",
    "retriever-update",
    "evaluator-update",
    "embedding-update",
    "guardrail-update",
    "observation-update",
}
_LEGACY_TYPES = {"GENERATION": "LLM", "SPAN": "SPAN", "EVENT": "EVENT"}
_OTHER_TYPES = {"trace-create", "score-create", "sdk-log", "observation-create"}
EVENT_TYPES = frozenset(_CREATE_KINDS) | _UPDATE_TYPES | _OTHER_TYPES
_LEVELS = {"DEBUG", "DEFAULT", "WARNING", "ERROR"}
_SCORE_TYPES = {"NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT", "CORRECTION"}
_TOKEN_UNITS = {None, "TOKENS", "tokens"}


class _Invalid(Exception):
    pass


def _id(value: Any, field: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise _Invalid(f"{field} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"{field} must be a non-empty string")
    if len(value) > 800 or "\r" in value:
        raise _Invalid(f"{field} must be at most 800 characters without carriage returns")
    return value.strip()


def _opt_str(body: dict, key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise _Invalid(f"body.{key} must be a string")
    return value


def _time(body: dict, key: str) -> datetime | None:
    value = body.get(key)
    if value is None:
        return None
    dt = parse_iso_datetime(value)
    if dt is None:
        raise _Invalid(f"body.{key} must be an ISO-8601 datetime (e.g. 2025-01-01T12:00:00.000Z), got {value!r}")
    return dt


def _non_negative_numbers(d: Any, field: str) -> dict:
    """A usage / cost map: numbers >= 0 (nested *_details objects, a `unit` string and nulls are allowed)."""
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise _Invalid(f"{field} must be an object")
    for k, v in d.items():
        if v is None or isinstance(v, dict) or (k == "unit" and isinstance(v, str)):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Invalid(f"{field}.{k} must be a number, got {v!r}")
        if v < 0:
            raise _Invalid(f"{field}.{k} must not be negative, got {v!r}")
    return d


def _io(value: Any) -> Any:
    return decode_jsonish(value) if isinstance(value, str) else value


def _metadata(value: Any) -> dict:
    if value is None:
        return {}
    value = _io(value)
    return value if isinstance(value, dict) else {"metadata": value}


def _observation_fields(body: dict, *, is_create: bool, event_kind: str | None) -> dict:
    """SpanRecord fields carried by an observation body (only the keys present)."""
    f: dict[str, Any] = {}
    md: dict[str, Any] = {}
    if "name" in body:
        name = _opt_str(body, "name")
        if name is not None:
            f["name"] = name
    for key, field in (("startTime", "start_time"), ("endTime", "end_time")):
        dt = _time(body, key)
        if dt is not None:
            f[field] = dt
    cst = _time(body, "completionStartTime")
    if cst is not None:
        md["completion_start_time"] = cst.isoformat().replace("+00:00", "Z")
    if "input" in body:
        f["input"] = _io(body["input"])
    if "output" in body:
        f["output"] = _io(body["output"])
    if body.get("metadata") is not None:
        md.update(_metadata(body["metadata"]))
    level = body.get("level")
    if level is not None:
        if not isinstance(level, str) or level.upper() not in _LEVELS:
            raise _Invalid(f"body.level must be one of DEBUG, DEFAULT, WARNING, ERROR, got {level!r}")
        md["level"] = level.upper()
        if level.upper() == "ERROR":
            f["status"] = "error"
    msg = _opt_str(body, "statusMessage")
    if msg is not None:
        f["status_message"] = msg
    for key in ("version",):
        v = _opt_str(body, key)
        if v is not None:
            md[key] = v
    env = _opt_str(body, "environment")
    if env is not None:
        f["environment"] = env
    model = _opt_str(body, "model")
    if model is not None:
        f["model"] = model
    params = body.get("modelParameters")
    if params is not None:
        if not isinstance(params, dict):
            raise _Invalid("body.modelParameters must be an object")
        md["model_parameters"] = params
    usage = _non_negative_numbers(body.get("usage"), "body.usage")
    usage_details = _non_negative_numbers(body.get("usageDetails"), "body.usageDetails")
    cost_details = _non_negative_numbers(body.get("costDetails"), "body.costDetails")
    inp = out = cached = None
    if usage_details:
        inp, out, cached = usage_from_mapping(usage_details)
    if inp is None and out is None and usage and usage.get("unit") in _TOKEN_UNITS:
        inp, out, cached = usage_from_mapping(usage)
    if usage and usage.get("unit") not in _TOKEN_UNITS:
        md["usage"] = usage
    if inp is not None:
        f["input_tokens"] = inp
    if out is not None:
        f["output_tokens"] = out
    if cached is not None:
        f["cached_tokens"] = cached
    cost = cost_from_mapping(cost_details) if cost_details else None
    if cost is None and usage:
        cost = to_float(usage.get("totalCost"))
        if cost is None and (usage.get("inputCost") is not None or usage.get("outputCost") is not None):
            cost = (to_float(usage.get("inputCost")) or 0.0) + (to_float(usage.get("outputCost")) or 0.0)
    if cost is not None:
        f["cost"] = cost
    pn, pv = body.get("promptName"), body.get("promptVersion")
    if (pn is None) != (pv is None):
        raise _Invalid("body.promptName and body.promptVersion must be given together")
    if pn is not None:
        md["prompt_name"], md["prompt_version"] = pn, pv
    if md:
        f["metadata"] = md
    raw = {f"langfuse.{k}": v for k, v in body.items() if k not in _NOT_RAW and v is not None}
    if raw:
        f["attributes"] = raw
    if event_kind is not None and is_create:
        f["kind"] = event_kind
    return f


# body keys not repeated in `attributes` (they are the record's own fields or large payloads)
_NOT_RAW = frozenset(
    ("id", "traceId", "parentObservationId", "input", "output", "metadata", "name", "startTime", "endTime")
)


def _trace_fields(body: dict) -> dict:
    f: dict[str, Any] = {}
    md: dict[str, Any] = {}
    name = _opt_str(body, "name")
    if name is not None:
        f["name"] = name
    ts = _time(body, "timestamp")
    if ts is not None:
        f["start_time"] = ts
    for key, field in (
        ("userId", "user_id"),
        ("sessionId", "session_id"),
        ("release", "release"),
        ("environment", "environment"),
    ):
        v = _opt_str(body, key)
        if v is not None:
            f[field] = v
    if "input" in body:
        f["input"] = _io(body["input"])
    if "output" in body:
        f["output"] = _io(body["output"])
    tags = body.get("tags")
    if tags is not None:
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise _Invalid("body.tags must be an array of strings")
        f["tags"] = list(dict.fromkeys(t for t in tags if t))
    if body.get("metadata") is not None:
        md.update(_metadata(body["metadata"]))
    for key in ("version", "externalId"):
        v = _opt_str(body, key)
        if v is not None:
            md[key] = v
    if body.get("public") is not None:
        md["public"] = bool(body["public"])
    if md:
        f["metadata"] = md
        # clear.* conventions may arrive as trace metadata
        if "clear.outcome" in md:
            oc = outcome_value(md["clear.outcome"])
            if oc is not None:
                f["outcome"] = oc
        if "clear.score" in md:
            sc = score_value(md["clear.score"])
            if sc is not None:
                f["score"] = sc
        if md.get("clear.task.id") is not None:
            f["task_id"] = str(md["clear.task.id"])
    return f


def _merge(into: dict, fields: dict) -> None:
    for k, v in fields.items():
        if k in ("metadata", "attributes") and isinstance(into.get(k), dict):
            into[k] = {**into[k], **v}
        else:
            into[k] = v


def _score(body: dict, timestamp: datetime | None) -> ScoreRecord:
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Invalid("body.name is required (the score's name)")
    trace_raw = _id(body.get("traceId"), "body.traceId")
    if trace_raw is None:
        raise _Invalid("body.traceId is required: only trace and observation scores are supported")
    obs_raw = _id(body.get("observationId"), "body.observationId")
    data_type = body.get("dataType")
    if data_type is not None and data_type not in _SCORE_TYPES:
        raise _Invalid(f"body.dataType must be one of {', '.join(sorted(_SCORE_TYPES))}, got {data_type!r}")
    if "value" not in body or body["value"] is None:
        raise _Invalid("body.value is required (a number, or a string for CATEGORICAL / TEXT scores)")
    raw = body["value"]
    value: float | None
    string_value: str | None
    if isinstance(raw, bool):
        value, string_value = (1.0 if raw else 0.0), ("True" if raw else "False")
    elif isinstance(raw, (int, float)):
        value = to_float(raw)
        if value is None:
            raise _Invalid("body.value must be a finite number")
        string_value = None
        if data_type == "BOOLEAN":
            if value not in (0.0, 1.0):
                raise _Invalid("body.value of a BOOLEAN score must be 0 or 1")
            string_value = "True" if value == 1.0 else "False"
    elif isinstance(raw, str):
        if data_type in ("NUMERIC", "BOOLEAN"):
            raise _Invalid(f"body.value of a {data_type} score must be a number, got a string")
        value, string_value = None, raw
    else:
        raise _Invalid("body.value must be a number or a string")
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise _Invalid("body.comment must be a string")
    return ScoreRecord(
        trace_id=langfuse_trace_id(trace_raw),
        observation_id=langfuse_observation_id(obs_raw) if obs_raw else None,
        name=name.strip(),
        value=value,
        string_value=string_value,
        comment=comment,
        id=body.get("id") if isinstance(body.get("id"), str) else None,
        data_type=data_type,
        source=body.get("source") if isinstance(body.get("source"), str) else "API",
        metadata=body.get("metadata"),
        timestamp=timestamp,
        environment=body.get("environment") if isinstance(body.get("environment"), str) else None,
    )


def normalize_ingestion_batch(*, payload: dict) -> LangfuseBatch:
    """Validate and normalise one Langfuse ingestion request body. Raises LangfuseBatchError (-> 400) only when
    the body has no `batch` array; every per-event problem becomes an entry in `errors`."""
    if not isinstance(payload, dict) or not isinstance(payload.get("batch"), list):
        raise LangfuseBatchError(
            'The body must be a JSON object {"batch": [event, ...], "metadata": {...}} with a batch array.'
        )
    result = LangfuseBatch()
    accepted: list[tuple[int, int, datetime | None, str, dict, str]] = []  # (order, pos, ts, type, body, event id)

    for pos, event in enumerate(payload["batch"]):
        event_id = event.get("id") if isinstance(event, dict) else None
        try:
            if not isinstance(event, dict):
                raise _Invalid("each batch entry must be an event object {id, type, timestamp, body}")
            event_id = _id(event.get("id"), "id", required=True)
            etype = event.get("type")
            if etype == "dataset-run-item-create":
                raise _Invalid("dataset-run-item-create is internal to Langfuse and not accepted on the public API")
            if not isinstance(etype, str) or etype not in EVENT_TYPES:
                raise _Invalid(f"type must be one of {', '.join(sorted(EVENT_TYPES))}; got {etype!r}")
            ts = None
            if event.get("timestamp") is not None:
                ts = parse_iso_datetime(event["timestamp"])
                if ts is None:
                    raise _Invalid(f"timestamp must be an ISO-8601 datetime, got {event['timestamp']!r}")
            body = event.get("body")
            if not isinstance(body, dict):
                raise _Invalid("body must be an object")
            if etype == "sdk-log":
                result.logs.append(body.get("log"))
            elif etype == "score-create":
                result.scores.append(_score(body, ts))
            else:
                _validate_entity_event(etype, body)
                accepted.append((1 if etype in _UPDATE_TYPES else 0, pos, ts, etype, body, event_id))
        except _Invalid as exc:
            result.errors.append(
                {"id": event_id if isinstance(event_id, str) else "", "status": 400, "message": str(exc),
                 "error": "Invalid request data"}
            )
            continue
        result.successes.append({"id": event_id, "status": 201})

    _build_entities(result, accepted)
    return result


def _validate_entity_event(etype: str, body: dict) -> None:
    """Raise _Invalid for anything that would make the event unusable (checked before sorting/merging)."""
    if etype == "trace-create":
        _id(body.get("id"), "body.id")
        _trace_fields(body)
        return
    if etype in _UPDATE_TYPES:
        _id(body.get("id"), "body.id", required=True)
    else:
        _id(body.get("id"), "body.id")
    _id(body.get("traceId"), "body.traceId")
    _id(body.get("parentObservationId"), "body.parentObservationId")
    if etype in ("observation-create", "observation-update"):
        t = body.get("type")
        if etype == "observation-create" and (not isinstance(t, str) or t.upper() not in _LEGACY_TYPES):
            raise _Invalid("body.type must be GENERATION, SPAN or EVENT for observation-create")
    _observation_fields(body, is_create=etype not in _UPDATE_TYPES, event_kind=None)


def _ts_key(ts: datetime | None) -> float:
    return ts.timestamp() if ts is not None else float("-inf")


def _build_entities(result: LangfuseBatch, accepted: list) -> None:
    # creates first, then updates, each by envelope timestamp (stable on batch position)
    accepted.sort(key=lambda e: (e[0], _ts_key(e[2]), e[1]))
    traces: dict[str, dict] = {}  # original trace id -> {"fields", "first_ts"}
    observations: dict[str, dict] = {}  # original observation id -> {"fields", "created", "trace", ...}

    for is_update, _pos, ts, etype, body, event_id in accepted:
        if etype == "trace-create":
            trace_raw = (body.get("id") or "").strip() or f"event:{event_id}"
            entry = traces.setdefault(trace_raw, {"fields": {}, "ts": ts})
            _merge(entry["fields"], _trace_fields(body))
            continue
        obs_raw = (body.get("id") or "").strip() or f"event:{event_id}"
        if etype == "observation-create" or etype == "observation-update":
            t = body.get("type")
            kind = _LEGACY_TYPES.get(t.upper()) if isinstance(t, str) else None
        else:
            kind = _CREATE_KINDS.get(etype)
        is_create = not is_update
        fields = _observation_fields(body, is_create=is_create, event_kind=kind)
        if etype == "event-create" and "start_time" in fields and "end_time" not in fields:
            fields["end_time"] = fields["start_time"]
        entry = observations.get(obs_raw)
        if entry is None:
            entry = observations[obs_raw] = {"fields": {}, "created": False, "trace": None, "parent": None, "ts": ts}
        entry["created"] = entry["created"] or is_create
        if body.get("traceId"):
            entry["trace"] = body["traceId"].strip()
        if body.get("parentObservationId"):
            entry["parent"] = body["parentObservationId"].strip()
        _merge(entry["fields"], fields)

    # trace-level context, propagated to observations of the same trace in this batch
    trace_context: dict[str, dict] = {}
    for trace_raw, entry in traces.items():
        f = entry["fields"]
        trace_id = langfuse_trace_id(trace_raw)
        root_id = langfuse_root_span_id(trace_raw)
        result.traces.append(TraceUpdate(trace_id=trace_id, root_span_id=root_id, fields=dict(f)))
        trace_context[trace_raw] = {
            k: f[k] for k in ("release", "environment", "session_id", "user_id", "tags") if k in f
        }
        name = f.get("name") or "trace"
        node, fallback = node_fields(kind="CHAIN", name=name, agent_name=None, tool_name=None)
        start = f.get("start_time") or entry["ts"] or _now()
        attrs = {"langfuse.id": trace_raw, "langfuse.type": "trace"}
        record = SpanRecord(
            trace_id=trace_id,
            span_id=root_id,
            parent_span_id=None,
            name=name,
            kind="CHAIN",
            node=node,
            node_fallback=fallback,
            input=f.get("input"),
            output=f.get("output"),
            start_time=start,
            release=f.get("release"),
            environment=f.get("environment"),
            session_id=f.get("session_id"),
            user_id=f.get("user_id"),
            tags=list(f.get("tags", [])),
            metadata=dict(f.get("metadata", {})),
            attributes=attrs,
            scope=SCOPE,
            outcome=f.get("outcome"),
            score=f.get("score"),
            task_id=f.get("task_id"),
            is_root=True,
        )
        result.spans.append(record)
        result.provided_fields[(trace_id, root_id)] = frozenset(f) | {"name"}

    for obs_raw, entry in observations.items():
        f = entry["fields"]
        trace_raw = entry["trace"]
        span_id = langfuse_observation_id(obs_raw)
        if not entry["created"]:
            fields = dict(f)
            if entry["parent"]:
                fields["parent_span_id"] = langfuse_observation_id(entry["parent"])
            result.updates.append(
                SpanUpdate(trace_id=langfuse_trace_id(trace_raw) if trace_raw else None, span_id=span_id, fields=fields)
            )
            continue
        if trace_raw is None:
            trace_raw = obs_raw  # an observation without a trace becomes its own trace (deterministically)
        trace_id = langfuse_trace_id(trace_raw)
        parent = langfuse_observation_id(entry["parent"]) if entry["parent"] else langfuse_root_span_id(trace_raw)
        kind = f.get("kind", "SPAN")
        name = f.get("name") or kind.lower()
        md = f.get("metadata", {})
        carried_agent = None
        for key in ("gen_ai.agent.name", "agent.name", "agent_name"):
            if isinstance(md.get(key), str) and md[key].strip():
                carried_agent = md[key].strip()
                break
        agent_name = name if kind == "AGENT" else carried_agent
        tool_name = name if kind == "TOOL" else None
        node, fallback = node_fields(kind=kind, name=name, agent_name=agent_name, tool_name=tool_name)
        ctx = trace_context.get(trace_raw, {})
        attrs = {
            **f.get("attributes", {}),
            "langfuse.id": obs_raw,
            "langfuse.trace.id": trace_raw,
            "langfuse.type": kind,
        }
        if entry["parent"]:
            attrs["langfuse.parent_observation_id"] = entry["parent"]
        start = f.get("start_time") or entry["ts"] or _now()
        record = SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind=kind,
            node=node,
            node_fallback=fallback,
            agent_name=agent_name,
            tool_name=tool_name,
            model=f.get("model"),
            input=f.get("input"),
            output=f.get("output"),
            status=f.get("status", "unset"),
            status_message=f.get("status_message", ""),
            start_time=start,
            end_time=f.get("end_time"),
            input_tokens=f.get("input_tokens"),
            output_tokens=f.get("output_tokens"),
            cached_tokens=f.get("cached_tokens"),
            usage_is_aggregate=kind in ("AGENT", "CHAIN")
            and (f.get("input_tokens") is not None or f.get("output_tokens") is not None),
            cost=f.get("cost"),
            release=ctx.get("release"),
            environment=f.get("environment") or ctx.get("environment"),
            session_id=ctx.get("session_id"),
            user_id=ctx.get("user_id"),
            tags=list(ctx.get("tags", [])),
            metadata=dict(md),
            attributes=attrs,
            scope=SCOPE,
            is_root=False,
        )
        result.spans.append(record)
        result.provided_fields[(trace_id, span_id)] = frozenset(f) | {"parent_span_id"}


def _now() -> datetime:
    from datetime import timezone

    return datetime.now(timezone.utc)
