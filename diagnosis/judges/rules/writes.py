"""Rule judges about writes that need one run per task (issue 41, 4): each looks at one run alone, never at other
runs of its task, and knows no agent. A *write* is a tool whose name starts with a verb of CLEAR_WRITE_TOOL_VERBS
(diagnosis/conf.py; `is_write_tool`: `cancel_reservation`, `createIssue`). Every finding blames the step that issued
the call (judges/decision.py `deciding_step`: the LLM or AGENT span), quoting there what shows it, and cites the
call's arguments and the tool's reply on the tool span.

* `rule.ungrounded_write_argument`: a write passes a text value (an id, a name, a date) that appears in no earlier
  tool reply, no user message and not in the task: the agent made it up, or took it from its own earlier text.
* `rule.unconfirmed_write`: a write issued by a model turn whose input ends on a tool result: the agent went from a
  result to the change without a user message in between (it did not ask, or did not wait for, a confirmation).
  Only writes of an agent in a conversation (user messages in two of its turns or more): an autonomous run, or a
  pipeline whose agents each get their instructions once, has no one to confirm with.
* `rule.refused_write_retried`: a write the tool refused, followed by another write with no new user message in
  between: the agent worked around the refusal on its own. Only in conversations, like `unconfirmed_write`.

`rule.write_on_closed_object` is in closed.py, `rule.repeated_failing_call` and `rule.unbacked_claim` in calls.py. What they cannot see is in diagnosis/RUNS.md
("Judges that need one run per task").
"""

from __future__ import annotations

import re

from diagnosis import conf
from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.contrastive_tasks import _WORD, is_write_tool
from diagnosis.judges.decision import TraceIndex, call_evidence, call_said, deciding_step, failed
from diagnosis.judges.messages import TOOL_ROLES, USER_ROLES, messages_of
from diagnosis.judges.rules.verdicts import clip, rule_fail, rule_pass, rule_skip
from diagnosis.judges.text import maybe_json, normalise, value_text

# Text argument values shorter than this say nothing about where they came from ("no", "2"); longer, or with spaces,
# they are prose the agent writes itself (a reason, a message), not a value it was given: identifiers, codes, enums
# and dates have none (`BK-4471`, `one_way`, `2024-05-20`).
VALUE_MIN, _VALUE_MAX = 3, 80
_SEPARATORS = re.compile(r"[\s_\-]+")
# The title of rule.ungrounded_write_argument and rule.unnamed_write_choice (choices.py): a value the agent made up and
# one it picked among a reply's options without telling the user are one problem with one fix (the change's values
# come from, or are shown to, the user before the write), so their statements make one insight; the details tell
# the two apart. Apart, on tau-airline's every-run set, they made 16 open insights where issue 28 allows 15.
VALUE_NOT_FROM_USER = "A write passes a value the user neither gave nor was told"


def loose_text(text: str) -> str:
    """Case and separators folded: `one_way`, "One-way" and "one way" are one value."""
    return _SEPARATORS.sub(" ", text).strip().casefold()


def verb_of_tool(name: str) -> str:
    """The first word of a tool name's last part, lower case: `cancel_reservation` → "cancel" (is_write_tool's)."""
    words = _WORD.findall(re.split(r"[./:]", name)[-1])
    return words[0].lower() if words else ""


def writes_of(trace: TraceView) -> list[SpanView]:
    verbs = conf.write_tool_verbs()
    return [s for s in trace.spans if s.kind == "TOOL" and is_write_tool(s.tool_name or s.name, verbs)]


def text_values(value, out: list[str], depth: int = 0) -> None:
    if depth > 10:
        return
    if isinstance(value, dict):
        for child in value.values():
            text_values(child, out, depth + 1)
    elif isinstance(value, list):
        for child in value:
            text_values(child, out, depth + 1)
    elif isinstance(value, str):
        text = value.strip()
        # Numbers written as text ("250") are amounts the agent computes, as often as values it was given.
        if VALUE_MIN <= len(text) <= _VALUE_MAX and not re.search(r"\s", text) \
                and not re.fullmatch(r"[\d.,]+", text):
            out.append(text)


def per_target(results: list[JudgeResult]) -> list[JudgeResult]:
    """One result per target (a judge leaves one Feedback per span): a step that issued several flagged calls gets
    one result holding every issue."""
    by_target: dict[str | None, JudgeResult] = {}
    for result in results:
        first = by_target.setdefault(result.target_span_id, result)
        if first is not result:
            first.issues += result.issues
    return list(by_target.values())


def first_finding(results: list[JudgeResult]) -> list[JudgeResult]:
    """The first finding of a run, with how many calls showed it. The first call is where the agent decided to act
    that way; later ones repeat the decision (mostly retries of the same write), and reported one by one each would
    count as another occurrence, away from the decision. On tau-airline's tune split, one finding per run put 14 of
    26 `unconfirmed_write` findings within one turn of a labelled wrong write, against 17 of 43 with every call."""
    first = results[0]
    first.details["calls_flagged"] = len(results)
    first.details["other_call_span_ids"] = [r.details.get("call_span_id") for r in results[1:]]
    return [first]


def write_blame(judge: str, call: SpanView, step: SpanView | None, critique: str, issue: JudgeIssue,
           **details) -> JudgeResult:
    target = step.span_id if step is not None else call.span_id
    return rule_fail(judge, target, critique, [issue], call_span_id=call.span_id, **details)


def ended_before(span: SpanView, call: SpanView) -> bool:
    return (span.end_time or span.start_time) <= call.start_time and span.span_id != call.span_id


# ---------------------------------------------------------------------------------------------------------------
# rule.ungrounded_write_argument


def _sources(trace: TraceView, call: SpanView) -> tuple[str, bool]:
    """Everything the agent had been given before `call`: the task, user messages and tool replies (as tool spans'
    outputs and as tool-role messages in model turns' inputs), folded; and whether any user text was found at all."""
    parts = [value_text(trace.goal)] if trace.goal not in (None, "") else []
    heard_user = bool(parts)
    for span in trace.spans:
        if span.kind == "TOOL" and ended_before(span, call):
            parts.append(value_text(span.output))
        elif span.kind in ("LLM", "AGENT") and span.start_time <= call.start_time:
            for message in messages_of(span.input):
                if message["role"] in USER_ROLES or message["role"] in TOOL_ROLES:
                    heard_user |= message["role"] in USER_ROLES
                    parts.append(value_text(message.get("content")))
    return loose_text("\n".join(parts)), heard_user


def rule_ungrounded_write_argument(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.ungrounded_write_argument"
    writes = writes_of(trace)
    if not writes:
        return [rule_pass(judge, "No write tool was called.")]
    index, results, heard_any = TraceIndex(trace), [], False
    for call in writes:
        given, heard_user = _sources(trace, call)
        heard_any |= heard_user
        if not heard_user:
            continue  # no user text recorded before the call: nothing to tell a given value from an invented one
        values: list[str] = []
        text_values(maybe_json(call.input), values)
        invented = [v for v in dict.fromkeys(values) if loose_text(v) not in given]
        if not invented:
            continue
        step = deciding_step(call, trace, index)
        tool = call.tool_name or call.name
        shown = ", ".join(f"`{v}`" for v in invented[:3])
        # The step quotes the value where its text holds it (the tool call it wrote), so the citation verifies.
        evidence = [Evidence(step.span_id, clip(invented[0]))] if step is not None and \
            normalise(invented[0]) in normalise(value_text(step.output)) else []
        issue = JudgeIssue(
            title=VALUE_NOT_FROM_USER,
            detail=f"{call_said(call, step)} It passed {shown}, which appear{'s' if len(invented) == 1 else ''} in "
                   "no tool reply, user message or the task before the call.",
            severity="medium", evidence=evidence + call_evidence(call, step))
        results.append(write_blame(judge, call, step, f"`{tool}` was called with {shown}, given by no one.", issue,
                              tool=tool, values=invented[:5]))
    if results:
        return first_finding(results)
    if not heard_any:
        return [rule_skip(judge, "No user message or task text was recorded before the writes: nothing to check "
                                 "their values against.")]
    return [rule_pass(judge, "Every text value of every write was given by a tool reply, the user or the task.")]


# ---------------------------------------------------------------------------------------------------------------
# rule.unconfirmed_write


def _agents_in_conversation(trace: TraceView) -> set[str]:
    """The agents (nodes) whose model turns received user messages in two turns or more: someone they talk with.
    Per agent and per turn, because in a pipeline each agent gets its instructions as a "user" message once (the
    example agent's workers: "Handle these requests from the customer's ticket: …"; its writer gets the ticket and
    a brief, two user messages in one turn), and that is no one in the loop."""
    heard: dict[str, set[str]] = {}
    turns: dict[str, int] = {}
    for span in trace.spans:  # start order
        if span.kind in ("LLM", "AGENT") and _new_user_message(span, heard.setdefault(span.node, set())):
            turns[span.node] = turns.get(span.node, 0) + 1
    return {node for node, count in turns.items() if count >= 2}


def conversation_gate(*, judge: str, trace: TraceView, nobody: str) -> tuple[list[JudgeResult] | None, list[SpanView]]:
    """(the pass or skip of a judge of writes that needs a conversation, or None; the writes it looks at): the writes
    issued by an agent in a conversation. Without one no one is in the loop (an autonomous pipeline, a batch job),
    which `nobody` words for the judge ("to confirm with")."""
    writes = writes_of(trace)
    if not writes:
        return [rule_pass(judge, "No write tool was called.")], []
    talking, index = _agents_in_conversation(trace), TraceIndex(trace)
    kept = [w for w in writes if w.node in talking
            or ((step := deciding_step(w, trace, index)) is not None and step.node in talking)]
    if not kept:
        return [rule_skip(judge, "No agent that called a write received user messages in two turns: no user in "
                                 f"the loop {nobody}.")], []
    return None, kept


def _new_user_message(span: SpanView, heard: set[str]) -> bool:
    """Whether a model turn received a user message not seen before (turns that resend the history repeat the old
    ones); adds what it heard to `heard`."""
    fresh = False
    for message in messages_of(span.input):
        if message["role"] in USER_ROLES:
            text = normalise(value_text(message.get("content")))
            fresh |= text not in heard
            heard.add(text)
    return fresh


def _retries_after_refusal(trace: TraceView, writes: set[str]) -> set[str]:
    """Writes made after a refused write with no new user message since: rule.refused_write_retried's case. On
    tau-airline's tune split, leaving them to it kept unconfirmed_write's 14 runs within one turn of a labelled
    wrong write and dropped 7 of its 26 statements that were not (the retry two turns after the labelled write)."""
    heard: set[str] = set()
    refused, retries = False, set()
    for span in trace.spans:  # start order
        if span.kind in ("LLM", "AGENT") and _new_user_message(span, heard):
            refused = False
        if span.span_id in writes:
            if refused:
                retries.add(span.span_id)
            refused |= failed(span)
    return retries


def rule_unconfirmed_write(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.unconfirmed_write"
    # Without a conversation every write would follow a tool result: the example agent's correct refunds do.
    gated, writes = conversation_gate(judge=judge, trace=trace, nobody="to confirm with")
    if gated is not None:
        return gated
    index, results, seen_roles = TraceIndex(trace), [], False
    retries = _retries_after_refusal(trace, {s.span_id for s in writes})
    for call in writes:
        if call.span_id in retries:
            continue  # rule.refused_write_retried's finding: a write is reported by one of the two, not both
        step = deciding_step(call, trace, index)
        messages = [m for m in messages_of(step.input) if m["role"] != "system"] if step is not None else []
        if not messages:
            continue  # a turn whose input carries no roles says nothing either way
        seen_roles = True
        if messages[-1]["role"] not in TOOL_ROLES:
            continue
        tool = call.tool_name or call.name
        issue = JudgeIssue(
            title="A write is called with no user message since the last tool result",
            detail=f"{call_said(call, step)} The turn that made it went on from a tool result "
                   f"(`{messages[-1].get('name') or messages[-1]['role']}`), with no user message in between.",
            severity="medium", evidence=call_evidence(call, step))
        results.append(write_blame(judge, call, step, f"`{tool}` changed state with no user message since the last "
                                                 "tool result.", issue, tool=tool))
    if results:
        return first_finding(results)
    if not seen_roles:
        return [rule_skip(judge, "The turns that called writes record no role-tagged input: nothing says whether a "
                                 "user message came before them.")]
    return [rule_pass(judge, "Every write followed a user message.")]


# ---------------------------------------------------------------------------------------------------------------
# rule.refused_write_retried


def rule_refused_write_retried(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    """A write the tool refused (an error reply), then another write with no new user message in between: the agent
    worked around the refusal on its own instead of going back to the user with what the tool said. On tau-airline's
    tune split (tasks 0-24, 100 runs) this held in 12 failing runs and no succeeding one, and the refused call sat
    within one turn of a labelled wrong write in 9 of the 12; a refusal after which the agent asked the user is the
    normal case in succeeding runs."""
    judge = "rule.refused_write_retried"
    gated, conversing = conversation_gate(judge=judge, trace=trace, nobody="to go back to")
    if gated is not None:
        return gated
    writes = {s.span_id for s in conversing}
    index, heard, refused = TraceIndex(trace), set(), None
    for span in trace.spans:  # start order
        if span.kind in ("LLM", "AGENT") and _new_user_message(span, heard):
            refused = None
        if span.span_id not in writes:
            continue
        if refused is not None:
            step = deciding_step(refused, trace, index)
            retry_step = deciding_step(span, trace, index)
            tool, retried = refused.tool_name or refused.name, span.tool_name or span.name
            issue = JudgeIssue(
                title="A write the tool refused is retried without going back to the user",
                detail=f"{call_said(refused, step)} With no user message since, "
                       f"{call_said(span, retry_step).replace('The agent', 'the agent', 1)}",
                severity="high",
                evidence=call_evidence(refused, step) + call_evidence(span, retry_step))
            # The refused call's step is blamed: it made the change the tool refused, and the retry went on from it.
            return [write_blame(judge, refused, step, f"`{tool}` was refused and `{retried}` was called next without "
                                                 "the user.", issue, tool=tool, retry_span_id=span.span_id,
                           retry_tool=retried)]
        if failed(span):
            refused = span
    return [rule_pass(judge, "No refused write was retried without a user message in between.")]
