"""Normalised records produced by the decoders (plain data, no Django).

`SpanRecord` is the contract with the storage layer. Every value in `input`, `output`, `metadata`, `attributes`,
`resource`, `events` and `exceptions` is JSON-able (NaN / ±Infinity become the strings "NaN", "Infinity",
"-Infinity"; bytes become base64 strings; event times are ISO-8601 strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

KINDS = ("AGENT", "LLM", "TOOL", "CHAIN", "RETRIEVER", "EMBEDDING", "GUARDRAIL", "EVALUATOR", "EVENT", "SPAN")


@dataclass(slots=True, kw_only=True)
class SpanRecord:
    trace_id: str  # 32 lower-case hex
    span_id: str  # 16 lower-case hex
    parent_span_id: str | None = None
    name: str
    kind: str = "SPAN"  # one of KINDS
    node: str | None = None  # decidable from the span alone, else None (see nodes.resolve_nodes)
    node_fallback: str = ""  # used when no AGENT ancestor is found
    agent_name: str | None = None
    tool_name: str | None = None
    model: str | None = None
    input: Any | None = None
    output: Any | None = None
    status: str = "unset"  # "ok" | "error" | "unset"
    status_message: str = ""
    start_time: datetime  # tz-aware UTC
    end_time: datetime | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None  # part of output_tokens
    usage_is_aggregate: bool = False  # re-reports its children's usage: do not add to sums
    cost: float | None = None
    release: str | None = None
    environment: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)  # raw span attributes as plain JSON values
    resource: dict = field(default_factory=dict)  # resource attributes (shared between spans of one resource)
    scope: str = ""
    events: list[dict] = field(default_factory=list)  # {name, time (ISO-8601), attributes}
    exceptions: list[dict] = field(default_factory=list)  # {type, message, stacktrace}
    outcome: str | None = None  # "success" | "failure" (clear.outcome)
    score: float | None = None  # clear.score, 0..1
    task_id: str | None = None  # clear.task.id
    is_root: bool = False


# Why a span (or a Langfuse event) was dropped from an accepted request: Settings' ingestion health counts by these
# codes, and stored counters keep them, so a code once used never changes its meaning.
INVALID_TRACE_ID = "invalid_trace_id"
INVALID_SPAN_ID = "invalid_span_id"
INVALID_PARENT_SPAN_ID = "invalid_parent_span_id"
INVALID_TIMESTAMP = "invalid_timestamp"
UNDECODABLE_SPAN = "undecodable_span"
INVALID_LANGFUSE_EVENT = "invalid_langfuse_event"


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanRejection:
    """A span dropped from an accepted request; the reason is decided where the span is refused, never read back
    from the message."""

    index: int  # in request order (a Langfuse event: its position in the batch)
    message: str  # for the client: names the span and the value
    reason: str  # one of the codes above
    # 32 lower-case hex when the span named a usable trace: its stored trace then shows a "rejected" badge
    trace_id: str = ""


@dataclass(slots=True)
class OtlpBatch:
    spans: list[SpanRecord] = field(default_factory=list)
    rejected: list[SpanRejection] = field(default_factory=list)  # spans dropped for missing / invalid ids or times


@dataclass(slots=True)
class SpanUpdate:
    """A partial update of an already-created span: `fields` holds only the SpanRecord fields the event carried.

    `trace_id` is None when the update event did not name its trace (look the span up by `span_id`).
    `metadata` (and `attributes`) in `fields` are partial dicts to merge into the stored ones; `tags` replace.
    """

    trace_id: str | None
    span_id: str
    fields: dict[str, Any]


@dataclass(slots=True)
class TraceUpdate:
    """Trace-level attributes from a Langfuse `trace-create` event, to merge into the trace and its root span.

    `root_span_id` is the deterministic id of the synthetic root span that represents the Langfuse trace (every
    top-level observation of the trace is parented to it). `fields` uses SpanRecord field names (name, input,
    output, user_id, session_id, release, environment, tags, metadata, start_time, outcome, score, task_id) and
    holds only the fields the event carried.
    """

    trace_id: str
    root_span_id: str
    fields: dict[str, Any]


@dataclass(slots=True)
class ScoreRecord:
    trace_id: str
    observation_id: str | None  # 16-hex span id, or None for a trace-level score
    name: str
    value: float | None
    string_value: str | None
    comment: str | None
    id: str | None = None  # original Langfuse score id (scores are upserted by it)
    data_type: str | None = None  # NUMERIC | CATEGORICAL | BOOLEAN | TEXT | CORRECTION
    source: str = "API"
    metadata: Any = None
    timestamp: datetime | None = None
    environment: str | None = None
    repairs: list[dict] = field(default_factory=list)  # [{field, reason, original_length}]: what was cleaned


@dataclass(slots=True)
class LangfuseBatch:
    successes: list[dict] = field(default_factory=list)  # {"id", "status": 201}
    errors: list[dict] = field(default_factory=list)  # {"id", "status": 400, "message", "error"}
    spans: list[SpanRecord] = field(default_factory=list)
    updates: list[SpanUpdate] = field(default_factory=list)
    traces: list[TraceUpdate] = field(default_factory=list)
    scores: list[ScoreRecord] = field(default_factory=list)
    logs: list[Any] = field(default_factory=list)  # sdk-log bodies (accepted, not stored)
    # {"id", "status": 201, "message", "error": "Repaired"} for events stored with repairs known when normalising
    # (scores, which have no metadata to carry them): not rejections, so kept apart from `errors`.
    repaired: list[dict] = field(default_factory=list)
    rejected: list[SpanRejection] = field(default_factory=list)  # one per entry of `errors`, in the same order
    # For every span in `spans`: the SpanRecord fields the events actually carried. A create for an entity that is
    # already stored (Langfuse creates are upserts) should be merged using only these fields.
    provided_fields: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def response_body(self) -> dict:
        """The `207 Multi-Status` body Langfuse SDKs expect."""
        return {"successes": self.successes, "errors": [*self.errors, *self.repaired]}
