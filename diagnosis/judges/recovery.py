"""When a tool's error is not a failure of the run: a *recovered* error (any run) and a *handled not-found*.

Used by rule.span_error and rule.tool_error (diagnosis/judges/rules/errors.py), through
diagnosis/judges/rules/verdicts.py `rule_recovered_error` and `rule_recovered`.

Recovered error (`error_recovery`). A TOOL span's error is *recovered* when the same run later reaches what the
failed call sought, whatever the run's final outcome (a run that failed many steps later for another reason still
recovered this error):

1. the same tool (same tool name, else span name) later succeeds with other arguments: the agent corrected the
   call; an identical retry is not a correction (a rate-limited call retried after a back-off stays an error: how
   often it happens is the finding), or
2. for a not-found (criterion 1 below) only: a later successful call of a tool that changes nothing (its name does
   not start with a verb of CLEAR_WRITE_TOOL_VERBS) returns the entity the failed call was after: its output holds
   one of the failed call's argument values, or the kind of record it was given (the name of an identifier argument,
   such as `user_id` or `order_number`, as a key of the output's JSON, or in the tool's name:
   `find_user_id_by_email`). A lookup by a wrong id says "not found", then the agent finds the customer by e-mail:
   the record was reached;

and no ancestor of the failed span (the agent that called it, up to the root) ended in error: the failure did not
propagate. A later call succeeds when its span is not in error, records no exception, carries no error payload and
reports no non-zero exit code.

Representation. A recovered error is not dropped and is no failing verdict: its rule returns the *same issue* as
the unrecovered error (same title, so the same pattern and the same insight: marking it in the title split every
tau-airline error pattern into two insights, benchmarks/insights_real/README.md "Tried and left out"), with severity
low, under a passing verdict flagged `details["recovered"] = True` (as an outlier on a succeeding run is kept under a
passing verdict). The insights count such occurrences apart inside the one insight
(diagnosis/clustering/stats.py `lift_traces`): the pages say "recovered in N of M runs", the failure association
(lift) is computed on the traces where the error was not recovered, and a pattern recovered in every trace is
associated only when its recovered occurrences are themselves associated with failure (a retry that "succeeds" with
wrong arguments: tau-airline's "payment amount does not add up", retried with another payment that went through);
otherwise it is not associated and gets no ticket.

Handled not-found (`recovered_not_found`). A lookup that finds nothing is often the right outcome: the customer
mistyped an order number, the file is not there, the record was deleted. Instrumentations still mark the tool span
ERROR (or return an error payload), so an error rule that stopped there would blame every run that correctly told
the user "no such order". A not-found that no later call recovered (above) passes, with no issue, when all of these
hold:

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
   empty and carries no error line (a raw "NotFoundError: …" handed to the user is the error, not an answer). Here
   the outcome matters: a not-found the agent never got past is an answer only when the run went well.

Other errors (timeouts, rate limits, crashes) are never handled not-founds: they are faults of the tool or of its use,
and how often they happen is the finding; they are recovered only by a corrected call of the same tool.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diagnosis.judges.contract import SpanView, TraceView
from diagnosis.judges.text import ERROR_LINE, dump, error_payload, has_content, maybe_json, normalise, plain_text

_NOT_FOUND = re.compile(
    r"not[\s_.\-]?found|notfound|\bno such\b|\bdoes(?:\s+not|n['’]t)\s+exist|\b404\b",
    re.IGNORECASE,
)
_ENVIRONMENT = re.compile(r"module\s*not\s*found|no module named|command not found|importerror", re.IGNORECASE)
_HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")


@dataclass(slots=True, frozen=True)
class Recovery:
    """A handled not-found: what said "not found", and the model turn that carried on after it."""

    quote: str
    next_span: SpanView


@dataclass(slots=True, frozen=True)
class ErrorRecovery:
    """A recovered error: the later call that reached what the failed one sought, and how ("corrected": the same
    tool with other arguments; "found": another call returned the entity a not-found was after)."""

    by: SpanView
    how: str


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


def _failed(span: SpanView) -> bool:
    from diagnosis.judges.rules.errors import exit_code_of  # errors.py imports this module

    if span.status == "error" or span.exceptions or error_payload(span.output) is not None:
        return True
    found = exit_code_of(span)
    return found is not None and found[0] != 0


def _arguments(span: SpanView) -> str:
    value = maybe_json(span.input)
    return normalise(dump(value) if isinstance(value, (dict, list)) else plain_text(value))


def _scalars(value, out: dict[str, str], depth: int = 0) -> None:
    """Argument name -> value, for the scalar arguments of a call (nested ones too)."""
    if depth > 4:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                _scalars(item, out, depth + 1)
            elif item not in (None, "", True, False):
                out.setdefault(str(key), str(item))
    elif isinstance(value, list):
        for item in value:
            _scalars(item, out, depth + 1)


def _keys(value, out: set[str], depth: int = 0) -> None:
    """Keys of a JSON value that hold something."""
    if depth > 6:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if item not in (None, "", [], {}):
                out.add(str(key).lower())
            _keys(item, out, depth + 1)
    elif isinstance(value, list):
        for item in value[:200]:
            _keys(item, out, depth + 1)


_MIN_VALUE_CHARS = 3  # shorter argument values ("1", "no") are in any output
# An argument that names a kind of record: an identifier's name (`user_id`, `orderId`, `order_number`, `email`). A
# bare `id`, or `name` and `query`, would be found in nearly any output.
_IDENTIFIER_NAME = re.compile(
    r"^(?:.+[_\-.](?:id|ids|number|no|code|key|uuid|sku)|.*[a-z](?:Id|Ids|Number|Code|Key|Uuid)|(?:.+[_\-.])?email)$",
    re.ASCII)


def _returns_sought(failed: SpanView, later: SpanView) -> bool:
    """Whether `later`'s output holds the entity `failed` was after: one of its argument values, or a record of the
    kind it was given (an identifier argument's name as a key of the output, or in the later tool's name)."""
    from diagnosis.judges.contrastive_tasks import is_write_tool
    from diagnosis.conf import write_tool_verbs

    if is_write_tool(later.tool_name or later.name, write_tool_verbs()):
        return False  # a write makes or changes a record: it does not find the one sought
    if not has_content(later.output):
        return False
    arguments: dict[str, str] = {}
    _scalars(maybe_json(failed.input), arguments)
    if not arguments:
        return False
    text = normalise(plain_text(maybe_json(later.output)) or str(later.output))
    if any(len(value) >= _MIN_VALUE_CHARS and normalise(value) in text for value in arguments.values()):
        return True
    keys: set[str] = set()
    _keys(maybe_json(later.output), keys)
    tool = (later.tool_name or later.name).lower()
    return any(name.lower() in keys or name.lower() in tool for name in arguments if _IDENTIFIER_NAME.match(name))


def error_recovery(span: SpanView, trace: TraceView) -> ErrorRecovery | None:
    """An ErrorRecovery when the failed TOOL `span`'s run later reaches what it sought (module docstring), else
    None. The run's outcome plays no part."""
    if span.kind != "TOOL":
        return None
    by_id = {s.span_id: s for s in trace.spans}
    if any(a.status == "error" for a in _ancestors(span, by_id)):
        return None
    tool = span.tool_name or span.name
    arguments = _arguments(span)
    not_found = not_found_quote(span) is not None
    ended = span.end_time or span.start_time
    for later in trace.spans:  # in start order (TraceView): the first call that reached it
        if later.span_id == span.span_id or later.kind != "TOOL" or later.start_time < ended or _failed(later):
            continue
        if (later.tool_name or later.name) == tool:
            if _arguments(later) != arguments:
                return ErrorRecovery(by=later, how="corrected")
        elif not_found and _returns_sought(span, later):
            return ErrorRecovery(by=later, how="found")
    return None


def recovered_not_found(span: SpanView, trace: TraceView) -> Recovery | None:
    """A Recovery when `span`'s error is a not-found the agent handled (criteria 1–4 above) and no later call
    recovered it (`error_recovery`: then it is a recovered error, kept as a low-severity finding), else None."""
    quote = not_found_quote(span)
    if quote is None or _run_failed(trace) or error_recovery(span, trace) is not None:
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
