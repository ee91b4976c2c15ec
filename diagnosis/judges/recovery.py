"""When a tool's "not found" is an answer the agent handled, not a failure (used by rule.span_error/tool_error).

A lookup that finds nothing is often the right outcome: the customer mistyped an order number, the file is not
there, the record was deleted. Instrumentations still mark the tool span ERROR (or return an error payload), so an
error rule that stopped there would blame every run that correctly told the user "no such order". A not-found only
excuses the span when the rest of the trace shows it was handled; otherwise it fails like any other error.

Criterion. A TOOL span's error is a *recovered not-found* when all of these hold:

1. It is a not-found: the span's `error.type`, an exception's type or message, its status message, its error
   payload or its HTTP status (404) says the thing asked for does not exist ("not found", `NotFound…`,
   `not_found`, "no such …", "does not exist", 404). A missing module or command (`ModuleNotFoundError`,
   "No module named", "command not found") is a broken environment, never an answer about the world: excluded.
2. The agent went on: a model turn (an LLM or AGENT span, not an ancestor of the tool span, not itself in error)
   started after the tool span ended, so someone read the result and acted on it. A not-found that is the last
   thing the trace did was never handled.
3. The failure did not propagate: no ancestor of the tool span (the agent that called it, up to the root) ended in
   error.
4. The run did not end in failure: the trace's outcome is not "failure", and its final output, when recorded, is not
   empty and carries no error line (a raw "NotFoundError: …" handed to the user is the error, not an answer).

Other errors (timeouts, rate limits, crashes) are not excused even when the agent went on: they are faults of the
tool or of its use, and how often they happen is the finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diagnosis.judges.contract import SpanView, TraceView
from diagnosis.judges.text import ERROR_LINE, error_payload, has_content, maybe_json, plain_text

_NOT_FOUND = re.compile(
    r"not[\s_.\-]?found|notfound|\bno such\b|\bdoes(?:\s+not|n['’]t)\s+exist|\b404\b",
    re.IGNORECASE,
)
_ENVIRONMENT = re.compile(r"module\s*not\s*found|no module named|command not found|importerror", re.IGNORECASE)
_HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")


@dataclass(slots=True, frozen=True)
class Recovery:
    """A recovered not-found: what said "not found", and the model turn that carried on after it."""

    quote: str
    next_span: SpanView


def _error_texts(span: SpanView) -> list[str]:
    texts = [str(span.attributes.get("error.type") or ""), span.status_message or ""]
    for exc in span.exceptions or []:
        texts += [str(exc.get("type") or ""), str(exc.get("message") or "")]
    payload = error_payload(span.output)
    if payload:
        texts.append(payload)
    return [text for text in texts if text.strip()]


def not_found_quote(span: SpanView) -> str | None:
    """The text that says a tool's error is a not-found (criterion 1), or None."""
    if span.kind != "TOOL":
        return None
    texts = _error_texts(span)
    if any(_ENVIRONMENT.search(text) for text in texts):
        return None
    for text in texts:
        if _NOT_FOUND.search(text):
            return text.strip()[:200]
    for key in _HTTP_STATUS_KEYS:
        if str(span.attributes.get(key) or "").strip() == "404":
            return "404"
    return None


def _ancestors(span: SpanView, by_id: dict[str, SpanView]) -> list[SpanView]:
    chain, seen = [], {span.span_id}
    parent = by_id.get(span.parent_span_id)
    while parent is not None and parent.span_id not in seen:
        chain.append(parent)
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_span_id)
    return chain


def _run_failed(trace: TraceView) -> bool:
    if (trace.outcome or "").lower() == "failure":
        return True
    final = trace.final_output
    if final is None:
        return False  # not recorded says nothing either way
    return not has_content(final) or bool(ERROR_LINE.search(plain_text(maybe_json(final))))


def recovered_not_found(span: SpanView, trace: TraceView) -> Recovery | None:
    """A Recovery when `span`'s error is a not-found the agent handled (criteria 1–4 above), else None."""
    quote = not_found_quote(span)
    if quote is None or _run_failed(trace):
        return None
    by_id = {s.span_id: s for s in trace.spans}
    ancestors = _ancestors(span, by_id)
    if any(a.status == "error" for a in ancestors):
        return None
    ancestor_ids = {a.span_id for a in ancestors}
    ended = span.end_time or span.start_time
    for other in trace.spans:
        if other.span_id == span.span_id or other.span_id in ancestor_ids:
            continue
        if other.kind in ("LLM", "AGENT") and other.status != "error" and other.start_time >= ended:
            return Recovery(quote=quote, next_span=other)
    return None
