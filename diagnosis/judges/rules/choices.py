"""A rule judge about writes that needs one run per task (issue 41, 4), beside writes.py:

* `rule.unnamed_write_choice`: in a conversation, a write passes a value that the agent picked among several a tool
  reply offered (one of a list's entries, one of an object's keyed entries: a payment method, a flight, an address)
  and that no message of the conversation named, neither the user's nor the agent's own: the user never saw, so could
  not have asked for or agreed to, what the change used. A write that passes every value a reply listed (an update
  resending a record's current items) picks nothing. Blames the step that issued the write; reports the run's first
  such write (`first_finding`). Its title is `rule.ungrounded_write_argument`'s (writes.py `VALUE_NOT_FROM_USER`):
  one insight for both.

On tau-airline's tune split (tasks 0-24, every run, 100 runs) it held in 39 failing runs and 8 succeeding ones, and
in 33 of the 38 labelled failing runs it flags, its statement sits within one agent turn of a labelled wrong write
(12 labelled runs had no statement of another judge there). Without the "among several" condition it held in 13
succeeding runs (a user's only gift card, called "your gift card"). What it cannot see is in diagnosis/RUNS.md.
"""

from __future__ import annotations

import re

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.decision import TraceIndex, call_evidence, call_said, deciding_step
from diagnosis.judges.messages import TOOL_ROLES, USER_ROLES, messages_of
from diagnosis.judges.rules.verdicts import clip, rule_pass
from diagnosis.judges.rules.writes import (
    VALUE_NOT_FROM_USER,
    conversation_gate,
    ended_before,
    first_finding,
    loose_text,
    text_values,
    write_blame,
)
from diagnosis.judges.text import maybe_json, normalise, value_text

# A calendar date is the value users most often give in other words ("May 20th", "next Friday"): never flagged.
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+Z?)?")
_DEPTH = 8


def _said_by_agent(span: SpanView) -> list[str]:
    """The text a model turn wrote to the user (its messages' text, not the tool calls it made: a call's arguments
    are not shown to the user)."""
    output = maybe_json(span.output)
    if isinstance(output, str):
        return [output]
    return [m["content"] for m in messages_of(output) if m["role"] not in (*USER_ROLES, *TOOL_ROLES, "system")]


def _conversation(trace: TraceView, call: SpanView) -> str:
    """Every message of the conversation before `call` (the task, the user's messages, the agent's texts), folded.
    Tool replies are not in it: what a tool returned is not what the user was shown."""
    parts = [value_text(trace.goal)] if trace.goal not in (None, "") else []
    for span in trace.spans:
        if span.kind not in ("LLM", "AGENT") or span.start_time > call.start_time:
            continue
        parts += [value_text(m.get("content")) for m in messages_of(span.input) if m["role"] in USER_ROLES]
        if ended_before(span, call):
            parts += _said_by_agent(span)
    return loose_text("\n".join(parts))


def _alternatives(value, out: dict[str, set[str]], depth: int = 0) -> None:
    """value → the other values it was offered beside: the same key's values across a list of objects, or the keys
    of an object whose entries are objects (`{"card_1": {...}, "gift_2": {...}}`)."""
    if depth > _DEPTH:
        return
    if isinstance(value, list):
        items = [v for v in value if isinstance(v, dict)]
        for key in {k for item in items for k in item}:
            offered = {str(item[key]) for item in items
                       if isinstance(item.get(key), (str, int)) and not isinstance(item.get(key), bool)}
            if len(offered) >= 2:
                for one in offered:
                    out.setdefault(loose_text(one), set()).update(offered)
        for child in value:
            _alternatives(child, out, depth + 1)
    elif isinstance(value, dict):
        keyed = [str(k) for k, v in value.items() if isinstance(v, dict)]
        if len(keyed) >= 2:
            for key in keyed:
                out.setdefault(loose_text(key), set()).update(keyed)
        for child in value.values():
            _alternatives(child, out, depth + 1)


def _offered(trace: TraceView, call: SpanView) -> tuple[dict[str, set[str]], dict[str, SpanView]]:
    """Values the tool replies before `call` offered among others, and the latest reply that offered each."""
    offered: dict[str, set[str]] = {}
    where: dict[str, SpanView] = {}
    for span in trace.spans:
        if span.kind != "TOOL" or not ended_before(span, call):
            continue
        found: dict[str, set[str]] = {}
        _alternatives(maybe_json(span.output), found)
        for value, others in found.items():
            offered.setdefault(value, set()).update(others)
            where[value] = span
    return offered, where


def rule_unnamed_write_choice(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.unnamed_write_choice"
    # Without a conversation nobody is shown the choice: an autonomous run picks among options by design.
    gated, writes = conversation_gate(judge=judge, trace=trace, nobody="to name a choice to")
    if gated is not None:
        return gated
    index, results = TraceIndex(trace), []
    for call in writes:
        values: list[str] = []
        text_values(maybe_json(call.input), values)
        if not values:
            continue
        offered, where = _offered(trace, call)
        said = _conversation(trace, call)
        passed = {loose_text(v) for v in values}
        # A pick leaves options out: a write passing every value a reply listed carries the list over (an update
        # that resends a record's current items), it chooses nothing.
        unnamed = [v for v in dict.fromkeys(values) if len(offered.get(loose_text(v), ())) >= 2
                   and not {loose_text(o) for o in offered[loose_text(v)]} <= passed
                   and loose_text(v) not in said and not _DATE.fullmatch(v)]
        if not unnamed:
            continue
        value, reply = unnamed[0], where[loose_text(unnamed[0])]
        step = deciding_step(call, trace, index)
        tool, reply_tool = call.tool_name or call.name, reply.tool_name or reply.name
        shown = ", ".join(f"`{v}`" for v in unnamed[:3])
        others = sorted(offered[loose_text(value)] - {value})
        evidence = [Evidence(step.span_id, clip(value))] if step is not None and \
            normalise(value) in normalise(value_text(step.output)) else []
        issue = JudgeIssue(
            title=VALUE_NOT_FROM_USER,
            detail=f"{call_said(call, step)} It passed {shown}: `{reply_tool}` had offered `{value}` among "
                   f"{len(others) + 1} ({', '.join(f'`{o}`' for o in others[:3])}{', …' if len(others) > 3 else ''}),"
                   " and no message to or from the user named it before the call.",
            severity="medium", evidence=evidence + call_evidence(call, step) + [Evidence(reply.span_id, clip(value))])
        results.append(write_blame(judge, call, step, f"`{tool}` was called with {shown}, picked among what "
                                                 f"`{reply_tool}` offered without the user hearing of it.", issue,
                              tool=tool, values=unnamed[:5], read_span_id=reply.span_id))
    if results:
        return first_finding(results)
    return [rule_pass(judge, "Every value a write picked among a reply's options was named in the conversation.")]
