"""The one contract every judge follows (DESIGN §5), as plain data: no ORM objects cross it.

Input: a `TraceView` (and for step judges one of its spans). Output: `JudgeResult`s, stored as Feedback rows.
A judge that fails returns status "error" with `error` set, never a zero score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Status = Literal["ok", "error", "skipped", "truncated"]
Verdict = Literal["pass", "fail", "uncertain"]
Severity = Literal["low", "medium", "high", "critical"]


@dataclass(slots=True)
class Evidence:
    span_id: str
    quote: str


@dataclass(slots=True)
class JudgeIssue:
    title: str
    detail: str = ""
    severity: Severity = "medium"
    evidence: list[Evidence] = field(default_factory=list)


@dataclass(slots=True)
class SpanView:
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    node: str
    start_time: datetime
    end_time: datetime | None = None
    model: str = ""
    tool_name: str = ""
    input: Any = None
    output: Any = None
    status: str = "unset"
    status_message: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    attributes: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    exceptions: list[dict] = field(default_factory=list)


@dataclass(slots=True)
class TraceView:
    trace_id: str
    spans: list[SpanView]  # in start-time order
    goal: Any = None  # the root span's input (the task the agent was given)
    final_output: Any = None  # the root span's output
    outcome: str | None = None  # "success" | "failure" | None
    score: float | None = None
    task_id: str = ""
    release: str = ""
    synthetic_timing: bool = False  # timestamps are not real: latency is no evidence


@dataclass(slots=True)
class JudgeResult:
    judge: str  # e.g. "rule.span_error", "rubric.<rubric id>", "llm.step", "llm.trace"
    target_span_id: str | None  # None: the whole trace
    status: Status = "ok"
    score: float | None = None  # 0..1, None when not scored (error, skipped)
    verdict: Verdict | None = None
    critique: str = ""
    issues: list[JudgeIssue] = field(default_factory=list)
    model: str = ""
    prompt_version: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    latency_ms: float = 0.0
    cache_key: str = ""
    error: str = ""
    details: dict = field(default_factory=dict)  # judge-specific extras: per-dimension scores, root cause, rubrics
