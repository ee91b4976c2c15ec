"""`rule.write_on_closed_object`, a rule judge about writes that needs one run per task (issue 41, 4; beside
writes.py): a write about an object (the same `…id` value) whose latest reply said its status is closed
(`cancelled`, `deleted`, `closed`, …): the change contradicts what the agent had just read. A record's status is
its own: it is found by the record's own identifier, never by another object the record names. What it cannot see
is in diagnosis/RUNS.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.contrastive_tasks import _WORD
from diagnosis.judges.decision import TraceIndex, call_evidence, call_said, deciding_step
from diagnosis.judges.rules.verdicts import rule_pass
from diagnosis.judges.rules.writes import VALUE_MIN, ended_before, loose_text, per_target, write_blame, writes_of
from diagnosis.judges.text import maybe_json

# Status values that say an object can no longer be changed. Words, not an agent's vocabulary: any tool's record.
CLOSED_STATUSES = frozenset({"cancelled", "canceled", "closed", "deleted", "removed", "archived", "expired",
                             "revoked", "terminated", "void", "voided", "refunded", "rejected"})
_STATUS_KEYS = ("status", "state")
# `reservation_id`, `orderId`, `ID`, `id`; not `paid` or `valid`.
_ID_KEY = re.compile(r"(?:^|_)(?:id|Id|ID)$|(?<=[a-z])(?:Id|ID)$")


def _objects(value, kind: set[str], depth: int = 0) -> Iterable[tuple[dict, set[str]]]:
    """Every record in a reply, with the words that say what it is: the tool's name for the reply itself, the key
    that holds it for a nested one (`reservations` → reservation)."""
    if depth > 8:
        return
    if isinstance(value, dict):
        yield value, kind
        for key, child in value.items():
            yield from _objects(child, _words(str(key)), depth + 1)
    elif isinstance(value, list):
        for child in value:
            yield from _objects(child, kind, depth + 1)


def _words(name: str) -> set[str]:
    words = {w.lower() for w in _WORD.findall(name)}
    return words | {w[:-1] for w in words if w.endswith("s") and len(w) > 3}


def _own_id_key(obj: dict, kind: set[str]) -> str | None:
    """The key of the identifier a record is about: `id`; else the identifier key that names what the record is
    (`reservation_id` in `cancel_reservation`'s reply or under `reservations`); else its only identifier key. A
    record names other objects too (a reservation its `user_id`), and its status is its own: a cancelled
    reservation is not a cancelled user (tau-airline: `book_reservation` for a user whose other reservation
    `cancel_reservation` had just cancelled was flagged, in 4 of 5 one-run-per-task samplings, no ticket real).
    Not the first identifier key: stored as Postgres jsonb, a record's keys come back shortest first."""
    if "id" in obj:
        return "id"
    keys = [str(k) for k in obj if _ID_KEY.search(str(k))]
    named = [k for k in keys if _words(_ID_KEY.sub("", k)) & kind]
    if len(named) == 1:
        return named[0]
    return keys[0] if len(keys) == 1 else None


def _ids(call: SpanView) -> dict[str, str]:
    """The call's identifier arguments: `reservation_id`, `orderId`, `id` → their text values."""
    arguments = maybe_json(call.input)
    if not isinstance(arguments, dict):
        return {}
    return {str(k): str(v) for k, v in arguments.items() if isinstance(v, (str, int)) and not isinstance(v, bool)
            and _ID_KEY.search(str(k)) and len(str(v)) >= VALUE_MIN}


def _status_of(obj: dict, kind: set[str], key: str, value: str) -> str | None:
    """The record's status when it is the object `key: value` names (by its own identifier: the same key, or
    `id`)."""
    own = _own_id_key(obj, kind)
    if own not in (key, "id") or str(obj.get(own, "")) != value:
        return None
    for status_key in _STATUS_KEYS:
        status = obj.get(status_key)
        if isinstance(status, str):
            return status
    return None


def rule_write_on_closed_object(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.write_on_closed_object"
    writes = writes_of(trace)
    if not writes:
        return [rule_pass(judge, "No write tool was called.")]
    index, results = TraceIndex(trace), []
    for call in writes:
        ids = _ids(call)
        if not ids:
            continue
        latest: tuple[SpanView, str, str] | None = None  # (reply span, status, the id's value)
        for span in trace.spans:  # start order: the last match is the latest read
            if span.kind != "TOOL" or not ended_before(span, call):
                continue
            for obj, kind in _objects(maybe_json(span.output), _words(span.tool_name or span.name)):
                for key, value in ids.items():
                    status = _status_of(obj, kind, key, value)
                    if status is not None:
                        latest = (span, status, value)
        if latest is None or loose_text(latest[1]) not in CLOSED_STATUSES:
            continue
        read, status, value = latest
        step = deciding_step(call, trace, index)
        tool, read_tool = call.tool_name or call.name, read.tool_name or read.name
        issue = JudgeIssue(
            title="A write is called on an object whose latest reply said it is closed",
            detail=f"{call_said(call, step)} The latest reply about `{value}` before it, from `{read_tool}`, said "
                   f"its status is `{status}`.",
            severity="high", evidence=call_evidence(call, step) + [Evidence(read.span_id, status)])
        results.append(write_blame(judge, call, step, f"`{tool}` was called on `{value}`, which `{read_tool}` had said "
                                                 f"is {status}.", issue, tool=tool, status=status,
                              read_span_id=read.span_id))
    if results:
        return per_target(results)
    return [rule_pass(judge, "No write contradicted the latest read of its object.")]
