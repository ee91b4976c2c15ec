"""Normalise a Langfuse ingestion batch (`POST /api/public/ingestion`, research/observability.md §4.2).

    result = normalize_ingestion_batch(payload=json_body)
    result.response_body()   # the 207 body: {"successes": [{"id", "status": 201}],
                             #                "errors": [{"id", "status": 400, "message", "error"}]}
    result.spans             # SpanRecords for observations (and one synthetic root span per trace-create)
    result.updates           # SpanUpdates for observations updated without a create in this batch
    result.traces            # TraceUpdates (trace-level attributes, to merge into the trace / its root span)
    result.scores            # ScoreRecords
    result.rejected          # one SpanRejection per entry of errors (with the trace id it names, if usable)

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

from .langfuse_bodies import (
    InvalidEvent,
    event_id_value,
    observation_fields,
    score_record,
    score_repair_entry,
    trace_fields,
)
from .nodes import node_fields
from .records import INVALID_LANGFUSE_EVENT, LangfuseBatch, SpanRecord, SpanRejection, SpanUpdate, TraceUpdate
from .values import langfuse_observation_id, langfuse_root_span_id, langfuse_trace_id, parse_iso_datetime

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
                raise InvalidEvent("each batch entry must be an event object {id, type, timestamp, body}")
            event_id = event_id_value(event.get("id"), "id", required=True)
            etype = event.get("type")
            if etype == "dataset-run-item-create":
                raise InvalidEvent("dataset-run-item-create is internal to Langfuse and not accepted on the public API")
            if not isinstance(etype, str) or etype not in EVENT_TYPES:
                raise InvalidEvent(f"type must be one of {', '.join(sorted(EVENT_TYPES))}; got {etype!r}")
            ts = None
            if event.get("timestamp") is not None:
                ts = parse_iso_datetime(event["timestamp"])
                if ts is None:
                    raise InvalidEvent(f"timestamp must be an ISO-8601 datetime, got {event['timestamp']!r}")
            body = event.get("body")
            if not isinstance(body, dict):
                raise InvalidEvent("body must be an object")
            if etype == "sdk-log":
                result.logs.append(body.get("log"))
            elif etype == "score-create":
                score = score_record(body, ts)
                result.scores.append(score)
                repaired = score_repair_entry(event_id=event_id, record=score)
                if repaired is not None:
                    result.repaired.append(repaired)
            else:
                _validate_entity_event(etype, body)
                accepted.append((1 if etype in _UPDATE_TYPES else 0, pos, ts, etype, body, event_id))
        except InvalidEvent as exc:
            result.errors.append(
                {"id": event_id if isinstance(event_id, str) else "", "status": 400, "message": str(exc),
                 "error": "Invalid request data"}
            )
            result.rejected.append(SpanRejection(index=pos, message=str(exc), reason=INVALID_LANGFUSE_EVENT,
                                                 trace_id=_refused_trace_id(event)))
            continue
        result.successes.append({"id": event_id, "status": 201})

    _build_entities(result, accepted)
    return result


def _refused_trace_id(event: object) -> str:
    """The stored trace id a refused trace or observation event names, else "": a score is no span, and an
    observation without a traceId would have been a trace of its own, which cannot exist yet."""
    if not isinstance(event, dict) or not isinstance(event.get("body"), dict):
        return ""
    etype = event.get("type")
    if etype == "trace-create":
        raw = event["body"].get("id")
    elif etype in EVENT_TYPES and etype not in ("score-create", "sdk-log"):
        raw = event["body"].get("traceId")
    else:
        return ""
    try:
        raw = event_id_value(raw, "traceId")
    except InvalidEvent:
        return ""
    return langfuse_trace_id(raw) if raw else ""


def _validate_entity_event(etype: str, body: dict) -> None:
    """Raise InvalidEvent for anything that would make the event unusable (checked before sorting/merging)."""
    if etype == "trace-create":
        event_id_value(body.get("id"), "body.id")
        trace_fields(body)
        return
    if etype in _UPDATE_TYPES:
        event_id_value(body.get("id"), "body.id", required=True)
    else:
        event_id_value(body.get("id"), "body.id")
    event_id_value(body.get("traceId"), "body.traceId")
    event_id_value(body.get("parentObservationId"), "body.parentObservationId")
    if etype in ("observation-create", "observation-update"):
        t = body.get("type")
        if etype == "observation-create" and (not isinstance(t, str) or t.upper() not in _LEGACY_TYPES):
            raise InvalidEvent("body.type must be GENERATION, SPAN or EVENT for observation-create")
    observation_fields(body, is_create=etype not in _UPDATE_TYPES, event_kind=None)


def _merge(into: dict, fields: dict) -> None:
    for k, v in fields.items():
        if k in ("metadata", "attributes") and isinstance(into.get(k), dict):
            into[k] = {**into[k], **v}
        else:
            into[k] = v


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
            _merge(entry["fields"], trace_fields(body))
            continue
        obs_raw = (body.get("id") or "").strip() or f"event:{event_id}"
        if etype == "observation-create" or etype == "observation-update":
            t = body.get("type")
            kind = _LEGACY_TYPES.get(t.upper()) if isinstance(t, str) else None
        else:
            kind = _CREATE_KINDS.get(etype)
        is_create = not is_update
        fields = observation_fields(body, is_create=is_create, event_kind=kind)
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
            reasoning_tokens=f.get("reasoning_tokens"),
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
