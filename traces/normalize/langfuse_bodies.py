"""Langfuse ingestion event bodies -> validated record fields (used by langfuse.normalize_ingestion_batch).

`observation_fields` and `trace_fields` return the SpanRecord / TraceUpdate fields a body carries (only the keys
present, so updates merge over creates); `score_record` builds a ScoreRecord. Each raises InvalidEvent with a message
naming the field when the body breaks Langfuse's ingestion schema; the batch answers that event with a 400 entry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .context import outcome_value, score_value
from .records import ScoreRecord
from .repair import TOO_DEEP_MARK, describe, is_clean_text, repair_text
from .usage import cost_from_mapping, reasoning_from_mapping, usage_from_mapping
from .values import decode_jsonish, langfuse_observation_id, langfuse_trace_id, parse_iso_datetime, to_float

_LEVELS = {"DEBUG", "DEFAULT", "WARNING", "ERROR"}
_SCORE_TYPES = {"NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT", "CORRECTION"}
_TOKEN_UNITS = {None, "TOKENS", "tokens"}


class InvalidEvent(Exception):
    """One event breaks the ingestion schema; the message names the field."""


def event_id_value(value: Any, field: str, *, required: bool = False) -> str | None:
    """A Langfuse id (an event's, or one a body refers to), stripped."""
    if value is None:
        if required:
            raise InvalidEvent(f"{field} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidEvent(f"{field} must be a non-empty string")
    if len(value) > 800 or "\r" in value:
        raise InvalidEvent(f"{field} must be at most 800 characters without carriage returns")
    if not is_clean_text(value):
        # Ids are hashed (UTF-8) and matched as they are: one cleaned here could name another entity.
        raise InvalidEvent(f"{field} must not contain NUL characters or unpaired UTF-16 surrogates")
    return value.strip()


def _opt_str(body: dict, key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise InvalidEvent(f"body.{key} must be a string")
    return value


def _time(body: dict, key: str) -> datetime | None:
    value = body.get(key)
    if value is None:
        return None
    dt = parse_iso_datetime(value)
    if dt is None:
        raise InvalidEvent(f"body.{key} must be an ISO-8601 datetime (e.g. 2025-01-01T12:00:00.000Z), got {value!r}")
    return dt


def _non_negative_numbers(d: Any, field: str) -> dict:
    """A usage / cost map: numbers >= 0 (nested *_details objects, a `unit` string and nulls are allowed)."""
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise InvalidEvent(f"{field} must be an object")
    for k, v in d.items():
        if v is None or isinstance(v, dict) or (k == "unit" and isinstance(v, str)):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidEvent(f"{field}.{k} must be a number, got {v!r}")
        if v < 0:
            raise InvalidEvent(f"{field}.{k} must not be negative, got {v!r}")
    return d


def _io(value: Any) -> Any:
    return decode_jsonish(value) if isinstance(value, str) else value


def _metadata(value: Any) -> dict:
    if value is None:
        return {}
    value = _io(value)
    return value if isinstance(value, dict) else {"metadata": value}


def observation_fields(body: dict, *, is_create: bool, event_kind: str | None) -> dict:
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
            raise InvalidEvent(f"body.level must be one of DEBUG, DEFAULT, WARNING, ERROR, got {level!r}")
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
            raise InvalidEvent("body.modelParameters must be an object")
        md["model_parameters"] = params
    usage = _non_negative_numbers(body.get("usage"), "body.usage")
    usage_details = _non_negative_numbers(body.get("usageDetails"), "body.usageDetails")
    cost_details = _non_negative_numbers(body.get("costDetails"), "body.costDetails")
    inp = out = cached = reasoning = None
    if usage_details:
        inp, out, cached = usage_from_mapping(usage_details)
        reasoning = reasoning_from_mapping(usage_details)
    if inp is None and out is None and usage and usage.get("unit") in _TOKEN_UNITS:
        inp, out, cached = usage_from_mapping(usage)
        reasoning = reasoning_from_mapping(usage)
    if usage and usage.get("unit") not in _TOKEN_UNITS:
        md["usage"] = usage
    if inp is not None:
        f["input_tokens"] = inp
    if out is not None:
        f["output_tokens"] = out
    if cached is not None:
        f["cached_tokens"] = cached
    if reasoning is not None and (inp is not None or out is not None):
        f["reasoning_tokens"] = reasoning
    cost = cost_from_mapping(cost_details) if cost_details else None
    if cost is None and usage:
        cost = to_float(usage.get("totalCost"))
        if cost is None and (usage.get("inputCost") is not None or usage.get("outputCost") is not None):
            cost = (to_float(usage.get("inputCost")) or 0.0) + (to_float(usage.get("outputCost")) or 0.0)
    if cost is not None:
        f["cost"] = cost
    pn, pv = body.get("promptName"), body.get("promptVersion")
    if (pn is None) != (pv is None):
        raise InvalidEvent("body.promptName and body.promptVersion must be given together")
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


def trace_fields(body: dict) -> dict:
    """TraceUpdate fields carried by a trace-create body (only the keys present)."""
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
            raise InvalidEvent("body.tags must be an array of strings")
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


# The Score columns' max_length (traces.models.Score): a longer value would fail the batch's whole insert.
SCORE_NAME_MAX = 200
SCORE_ID_MAX = 200
SCORE_SOURCE_MAX = 40


def _score_text(body: dict, key: str, *, repairs: list[dict], limit: int | None = None) -> str | None:
    """A free-text score field, cleaned like a span's (repair.repair_text). A value that was an object or array
    nested too deep reaches here as marked text (deep_json): it was never a string, so it is refused."""
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or value.startswith(TOO_DEEP_MARK):
        raise InvalidEvent(f"body.{key} must be a string")
    return repair_text(value, field=key, repairs=repairs, limit=limit)


def score_record(body: dict, timestamp: datetime | None) -> ScoreRecord:
    """The ScoreRecord of a score-create body (trace and observation scores only). Free text is repaired (the
    repairs are on the record); ids that would need a repair are refused."""
    repairs: list[dict] = []
    name = body.get("name")
    if isinstance(name, str) and not name.startswith(TOO_DEEP_MARK):
        name = repair_text(name, field="name", repairs=repairs, limit=SCORE_NAME_MAX)
    if not isinstance(name, str) or not name.strip():
        raise InvalidEvent("body.name is required (the score's name)")
    trace_raw = event_id_value(body.get("traceId"), "body.traceId")
    if trace_raw is None:
        raise InvalidEvent("body.traceId is required: only trace and observation scores are supported")
    obs_raw = event_id_value(body.get("observationId"), "body.observationId")
    score_id = body.get("id") if isinstance(body.get("id"), str) else None
    if score_id is not None and (len(score_id) > SCORE_ID_MAX or not is_clean_text(score_id)):
        # Scores are upserted by id: a cut or cleaned id could overwrite another score.
        raise InvalidEvent(f"body.id must be at most {SCORE_ID_MAX} characters, without NUL characters or unpaired "
                           "UTF-16 surrogates")
    data_type = body.get("dataType")
    if data_type is not None and data_type not in _SCORE_TYPES:
        raise InvalidEvent(f"body.dataType must be one of {', '.join(sorted(_SCORE_TYPES))}, got {data_type!r}")
    if "value" not in body or body["value"] is None:
        raise InvalidEvent("body.value is required (a number, or a string for CATEGORICAL / TEXT scores)")
    raw = body["value"]
    value: float | None
    string_value: str | None
    if isinstance(raw, bool):
        value, string_value = (1.0 if raw else 0.0), ("True" if raw else "False")
    elif isinstance(raw, (int, float)):
        value = to_float(raw)
        if value is None:
            raise InvalidEvent("body.value must be a finite number")
        string_value = None
        if data_type == "BOOLEAN":
            if value not in (0.0, 1.0):
                raise InvalidEvent("body.value of a BOOLEAN score must be 0 or 1")
            string_value = "True" if value == 1.0 else "False"
    elif isinstance(raw, str) and not raw.startswith(TOO_DEEP_MARK):
        if data_type in ("NUMERIC", "BOOLEAN"):
            raise InvalidEvent(f"body.value of a {data_type} score must be a number, got a string")
        value, string_value = None, _score_text(body, "value", repairs=repairs)
    else:
        raise InvalidEvent("body.value must be a number or a string")
    comment = _score_text(body, "comment", repairs=repairs)
    source = body.get("source") if isinstance(body.get("source"), str) else None
    return ScoreRecord(
        trace_id=langfuse_trace_id(trace_raw),
        observation_id=langfuse_observation_id(obs_raw) if obs_raw else None,
        name=name.strip(),
        value=value,
        string_value=string_value,
        comment=comment,
        id=score_id,
        data_type=data_type,
        source=repair_text(source, field="source", repairs=repairs, limit=SCORE_SOURCE_MAX) if source is not None
        else "API",
        metadata=body.get("metadata"),
        timestamp=timestamp,
        environment=body.get("environment") if isinstance(body.get("environment"), str) else None,
        repairs=repairs,
    )


def score_repair_entry(*, event_id: str, record: ScoreRecord) -> dict | None:
    """The 207 entry telling the SDK a score was stored with repairs (status 201: nothing to resend)."""
    if not record.repairs:
        return None
    return {"id": event_id, "status": 201, "message": f"stored with repairs: {describe(record.repairs)}",
            "error": "Repaired"}
