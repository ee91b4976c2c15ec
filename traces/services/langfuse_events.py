"""Langfuse public-API objects (traces, observations, scores) -> Langfuse ingestion events, so that pulled data
goes through the same normalisation as pushed data (normalize_ingestion_batch). Each returns None for an object
without an id.
"""

from __future__ import annotations

from typing import Any

_OBSERVATION_EVENTS = {
    "GENERATION": "generation-create",
    "SPAN": "span-create",
    "EVENT": "event-create",
    "AGENT": "agent-create",
    "TOOL": "tool-create",
    "CHAIN": "chain-create",
    "RETRIEVER": "retriever-create",
    "EVALUATOR": "evaluator-create",
    "EMBEDDING": "embedding-create",
    "GUARDRAIL": "guardrail-create",
}
_LEVELS = {"DEBUG", "DEFAULT", "WARNING", "ERROR"}
_SCORE_TYPES = {"NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT", "CORRECTION"}
_STRING_SCORE_TYPES = {"CATEGORICAL", "TEXT", "CORRECTION"}


def _put(body: dict, key: str, value: Any) -> None:
    if value is not None:
        body[key] = value


def _numbers(value: Any) -> dict | None:
    """A usage / cost map keeping what the ingestion schema accepts (numbers >= 0, nested maps, a unit string)."""
    if not isinstance(value, dict):
        return None
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            continue
        if isinstance(item, (int, float)) and item >= 0:
            out[key] = item
        elif isinstance(item, str) and key == "unit":
            out[key] = item
        elif isinstance(item, str):
            try:
                number = float(item)
            except ValueError:
                continue
            if number >= 0:
                out[key] = int(number) if number.is_integer() else number
        elif isinstance(item, dict):
            out[key] = item
    return out or None


def trace_event(*, trace: dict) -> dict | None:
    trace_id = trace.get("id")
    if not isinstance(trace_id, str) or not trace_id.strip():
        return None
    body: dict[str, Any] = {"id": trace_id}
    for key in ("timestamp", "name", "input", "output", "sessionId", "userId", "release", "version",
                "environment", "metadata", "externalId"):
        _put(body, key, trace.get(key))
    if isinstance(trace.get("tags"), list):
        body["tags"] = [t for t in trace["tags"] if isinstance(t, str)]
    if isinstance(trace.get("public"), bool):
        body["public"] = trace["public"]
    return {"id": f"clear-pull-trace-{trace_id}", "type": "trace-create", "timestamp": trace.get("timestamp"),
            "body": body}


def observation_event(*, observation: dict) -> dict | None:
    obs_id = observation.get("id")
    if not isinstance(obs_id, str) or not obs_id.strip():
        return None
    kind = str(observation.get("type") or "SPAN").upper()
    event_type = _OBSERVATION_EVENTS.get(kind, "span-create")
    body: dict[str, Any] = {"id": obs_id}
    for key in ("traceId", "parentObservationId", "name", "startTime", "endTime", "completionStartTime", "input",
                "output", "metadata", "statusMessage", "version", "environment"):
        _put(body, key, observation.get(key))
    model = observation.get("model") or observation.get("providedModelName")
    if isinstance(model, str) and model:
        body["model"] = model
    level = observation.get("level")
    if isinstance(level, str) and level.upper() in _LEVELS:
        body["level"] = level.upper()
    if isinstance(observation.get("modelParameters"), dict):
        body["modelParameters"] = observation["modelParameters"]
    usage_details = _numbers(observation.get("usageDetails"))
    cost_details = _numbers(observation.get("costDetails"))
    usage = _numbers(observation.get("usage"))
    if usage_details:
        body["usageDetails"] = usage_details
    if usage and not usage_details:
        body["usage"] = usage
    if not cost_details:
        for key in ("calculatedTotalCost", "totalCost"):
            total = observation.get(key)
            if isinstance(total, (int, float)) and not isinstance(total, bool) and total >= 0:
                cost_details = {"total": total}
                break
    if cost_details:
        body["costDetails"] = cost_details
    prompt_name, prompt_version = observation.get("promptName"), observation.get("promptVersion")
    if prompt_name is not None and prompt_version is not None:
        body["promptName"], body["promptVersion"] = prompt_name, prompt_version
    return {"id": f"clear-pull-observation-{obs_id}", "type": event_type,
            "timestamp": observation.get("startTime"), "body": body}


def score_event(*, score: dict) -> dict | None:
    score_id = score.get("id")
    if not isinstance(score_id, str) or not score_id.strip():
        return None
    data_type = score.get("dataType") if score.get("dataType") in _SCORE_TYPES else None
    value = score.get("value")
    string_value = score.get("stringValue")
    if (data_type in _STRING_SCORE_TYPES or value is None) and isinstance(string_value, str):
        value = string_value
    body: dict[str, Any] = {"id": score_id, "value": value}
    for key in ("traceId", "observationId", "name", "comment", "source", "environment", "metadata"):
        _put(body, key, score.get(key))
    _put(body, "dataType", data_type)
    return {"id": f"clear-pull-score-{score_id}", "type": "score-create", "timestamp": score.get("timestamp"),
            "body": body}


__all__ = [
    "observation_event",
    "score_event",
    "trace_event",
]
