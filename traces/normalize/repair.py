"""Make one span storable on its own: what can be kept is kept, and every change is recorded on the span.

    repairs = repair_record(record)      # [{field, reason, original_length}], also in metadata["clear.repairs"]
    repairs = repair_fields(fields)      # the same on a dict of SpanRecord fields (Langfuse updates)
    text = repair_text(text, field="comment", repairs=repairs, limit=None)  # one value kept outside a span

A bounded column is cut to its length, NUL is removed (Postgres text and jsonb cannot hold it), a lone surrogate
(text cut inside a UTF-16 pair) becomes U+FFFD (it cannot be encoded as UTF-8), and a value nested deeper than
MAX_DEPTH is kept as its JSON text. `deep_json.loads_bounded` marks the values it had to keep as text with
TOO_DEEP_MARK; they are unmarked here and recorded as such.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from .records import SpanRecord

# The Span columns' max_length: a longer value would fail the whole insert.
BOUNDED = {
    "name": 500, "node": 300, "node_fallback": 300, "agent_name": 300, "tool_name": 300, "model": 300, "scope": 300,
    "release": 200, "environment": 200, "session_id": 200, "user_id": 200, "task_id": 200,
}
JSON_FIELDS = ("input", "output", "metadata", "attributes", "resource", "events", "exceptions", "tags",
               "status_message")  # status_message is unbounded text: only cleaned
MAX_DEPTH = 200  # orjson's own limit is 254: deeper values are walked and cut here
MAX_DEEP_TEXT = 256 * 1024  # a value kept as JSON text is cut here, so one deep value cannot bloat the row
TOO_DEEP_MARK = "\ue000clear:too-deep\ue000"
REPAIRS_KEY = "clear.repairs"


def _replace_surrogates(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def _as_text(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        text = "[nested too deep to keep]"
    return _replace_surrogates(text.replace("\x00", "").replace(TOO_DEEP_MARK, ""))[:MAX_DEEP_TEXT]


def _clean_value(value: Any, *, field: str, depth: int, repairs: list[dict]) -> Any:
    if isinstance(value, str):
        return _clean_string(value, field=field, repairs=repairs)
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            text = _as_text(value)
            repairs.append({"field": field, "reason": "nested_too_deep", "original_length": len(text)})
            return text
        return {_clean_string(str(k), field=field, repairs=repairs): _clean_value(v, field=field, depth=depth + 1,
                                                                                  repairs=repairs)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            text = _as_text(value)
            repairs.append({"field": field, "reason": "nested_too_deep", "original_length": len(text)})
            return text
        return [_clean_value(v, field=field, depth=depth + 1, repairs=repairs) for v in value]
    return value


def _clean_string(text: str, *, field: str, repairs: list[dict]) -> str:
    if text.startswith(TOO_DEEP_MARK):
        text = text[len(TOO_DEEP_MARK):]
        repairs.append({"field": field, "reason": "nested_too_deep", "original_length": len(text)})
        text = text[:MAX_DEEP_TEXT]
    if "\x00" in text:
        repairs.append({"field": field, "reason": "nul_removed", "original_length": len(text)})
        text = text.replace("\x00", "")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            repairs.append({"field": field, "reason": "lone_surrogate_replaced", "original_length": len(text)})
            text = _replace_surrogates(text)
    return text


def repair_text(text: str, *, field: str, repairs: list[dict], limit: int | None = None) -> str:
    """One free-text value made storable (NUL removed, lone surrogates replaced, cut to `limit`); what was changed
    is appended to `repairs`. For values stored outside a span (a score's name, comment...)."""
    text = _clean_string(text, field=field, repairs=repairs)
    if limit is not None and len(text) > limit:
        repairs.append({"field": field, "reason": "truncated", "original_length": len(text)})
        text = text[:limit]
    return text


def is_clean_text(text: str) -> bool:
    """No NUL, no lone surrogate, no too-deep mark: an identifier that would need a repair is refused instead,
    since changing it could make it name something else."""
    return "\x00" not in text and TOO_DEEP_MARK not in text and (text.isascii() or _encodes(text))


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _needs_walk(value: Any) -> bool:
    """orjson refuses surrogates and depth beyond 254 and shows NUL as an escape: one C pass finds the clean case."""
    try:
        encoded = orjson.dumps(value, default=str)
    except (orjson.JSONEncodeError, TypeError):
        return True
    return b"\\u0000" in encoded or TOO_DEEP_MARK.encode() in encoded


def _collapse(repairs: list[dict]) -> list[dict]:
    """One entry per (field, reason): 10,000 attributes with a NUL are one repair, with the longest original."""
    out: dict[tuple[str, str], dict] = {}
    for repair in repairs:
        key = (repair["field"], repair["reason"])
        seen = out.get(key)
        if seen is None:
            out[key] = dict(repair)
        elif (repair.get("original_length") or 0) > (seen.get("original_length") or 0):
            seen["original_length"] = repair["original_length"]
    return list(out.values())


def repair_fields(fields: dict[str, Any], *, clean: set[int] | None = None) -> list[dict]:
    """Repair a dict of SpanRecord field values in place; returns the repairs (also merged into its metadata).

    `clean` holds the ids of containers already found clean: the resource dict every span of a batch shares is
    then checked once per batch, not once per span."""
    repairs: list[dict] = []
    for name, limit in BOUNDED.items():
        value = fields.get(name)
        if not isinstance(value, str) or not value:
            continue
        fields[name] = repair_text(value, field=name, repairs=repairs, limit=limit)
    # One C pass over all of them first: nearly every span is clean.
    pending = [name for name in JSON_FIELDS if not (clean is not None and id(fields.get(name)) in clean)]
    if not _needs_walk([fields.get(name) for name in pending]):
        pending = []
        if clean is not None and isinstance(fields.get("resource"), dict):
            clean.add(id(fields["resource"]))
    for name in pending:
        value = fields.get(name)
        if value is None or isinstance(value, (int, float, bool)):
            continue
        if isinstance(value, str):
            fields[name] = _clean_string(value, field=name, repairs=repairs)
        elif clean is not None and id(value) in clean:
            continue
        elif _needs_walk(value):
            fields[name] = _clean_value(value, field=name, depth=0, repairs=repairs)
        elif clean is not None and name == "resource":
            clean.add(id(value))
    if repairs:
        repairs = _collapse(repairs)
        metadata = fields.get("metadata")
        metadata = dict(metadata) if isinstance(metadata, dict) else {}
        metadata[REPAIRS_KEY] = [*metadata.get(REPAIRS_KEY, []), *repairs]
        fields["metadata"] = metadata
    return repairs


_RECORD_FIELDS = (*BOUNDED, *JSON_FIELDS)


def repair_record(record: SpanRecord, *, clean: set[int] | None = None) -> list[dict]:
    """Repair one record in place; returns every repair it carries (the decoder's time repairs included).
    `clean`: see repair_fields (pass one set per batch, while its records are alive)."""
    fields = {name: getattr(record, name) for name in _RECORD_FIELDS}
    if repair_fields(fields, clean=clean):
        for name, value in fields.items():
            setattr(record, name, value)
    metadata = record.metadata
    return list(metadata.get(REPAIRS_KEY) or []) if isinstance(metadata, dict) else []


def note_repairs(record: SpanRecord, repairs: list[dict]) -> None:
    """Record repairs a decoder made (times) on the span, before repair_record adds its own."""
    if repairs:
        metadata = dict(record.metadata or {})
        metadata[REPAIRS_KEY] = [*metadata.get(REPAIRS_KEY, []), *repairs]
        record.metadata = metadata


def describe(repairs: list[dict]) -> str:
    return ", ".join(f"{r['field']} {r['reason'].replace('_', ' ')}" for r in repairs)


def langfuse_repair_errors(*, payload: Any, repaired: list[tuple[SpanRecord, list[dict]]]) -> list[dict]:
    """Per-event entries for the 207 body of a Langfuse ingestion: each event whose observation was stored with
    repairs (status 201: it is stored, nothing to resend), so the SDK logs what was changed."""
    by_observation = {str(record.attributes.get("langfuse.id")): repairs for record, repairs in repaired
                      if isinstance(record.attributes, dict) and record.attributes.get("langfuse.id")}
    if not by_observation or not isinstance(payload, dict) or not isinstance(payload.get("batch"), list):
        return []
    out = []
    for event in payload["batch"]:
        if not isinstance(event, dict) or not isinstance(event.get("body"), dict):
            continue
        body_id = event["body"].get("id")
        # An observation sent without an id is known by its event's ("event:<event id>", as langfuse.py names it).
        key = body_id.strip() if isinstance(body_id, str) and body_id.strip() else f"event:{event.get('id')}"
        repairs = by_observation.get(key)
        if repairs and event.get("type") != "trace-create":
            out.append({"id": event.get("id") if isinstance(event.get("id"), str) else "", "status": 201,
                        "message": f"stored with repairs: {describe(repairs)}", "error": "Repaired"})
    return out
