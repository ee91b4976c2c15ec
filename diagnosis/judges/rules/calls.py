"""Rule judges over a run's calls and its final answer that need one run per task (issue 41, 4), beside writes.py:

* `rule.repeated_failing_call`: a tool is called again with the identical arguments of an earlier call of it that
  failed, and fails again: the agent did not read the error. A retry that then went through is a transient error
  handled (a rate limit, a timeout; the example agent's billing worker retries once after a back-off), not reported.
  Blamed on the step that repeated the call.
  (`rule.repeated_tool_call` needs 3 identical calls under one parent, failing or not; this one needs 2, the first
  failed, anywhere in the run, and leaves the calls that one reports to it.)
* `rule.unbacked_claim`: the final answer says an action was done ("your reservation has been cancelled", "I have
  updated …") with a verb of CLEAR_WRITE_TOOL_VERBS, and the run's writes of that verb all failed (or no write at
  all succeeded: a verb no write was tried for may be a synonym, "issued" a refund that `create_refund` made).
  Checked only on runs that call at least one write tool: an agent that never acts through tools (a group chat
  writing code) says "I have updated the script" about its own text.

What they cannot see is in diagnosis/RUNS.md ("Judges that need one run per task").
"""

from __future__ import annotations

import re
from collections import Counter

from diagnosis import conf
from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.decision import TraceIndex, arguments_of, call_evidence, call_said, deciding_step, failed
from diagnosis.judges.rules.repetition import REPEATED_CALL_THRESHOLD
from diagnosis.judges.rules.verdicts import clip, rule_fail, rule_pass
from diagnosis.judges.rules.writes import first_finding, verb_of_tool, writes_of
from diagnosis.judges.text import maybe_json, plain_text

# ---------------------------------------------------------------------------------------------------------------
# rule.repeated_failing_call


def rule_repeated_failing_call(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.repeated_failing_call"
    index, results = TraceIndex(trace), []
    failures: dict[tuple[str, str], SpanView] = {}  # (tool, arguments) -> the first call of them that failed
    # Calls repeated REPEATED_CALL_THRESHOLD+ times under one parent are rule.repeated_tool_call's finding (the
    # loop, named by its count): a second finding on the same calls would split one problem into two insights.
    under_parent = Counter((s.parent_span_id, s.tool_name or s.name, arguments_of(s)) for s in trace.spans
                           if s.kind == "TOOL")
    for call in trace.spans:  # start order
        if call.kind != "TOOL":
            continue
        tool, arguments = call.tool_name or call.name, arguments_of(call)
        if not arguments:
            continue  # a call without arguments (a poll, "list all") is the same call by design
        key = (tool, arguments)
        first = failures.get(key)
        looping = under_parent[(call.parent_span_id, tool, arguments)] >= REPEATED_CALL_THRESHOLD
        if first is not None and first.start_time <= call.start_time and not looping and failed(call):
            step = deciding_step(call, trace, index)
            issue = JudgeIssue(
                title="A call that failed is repeated with identical arguments",
                detail=f"{call_said(call, step)} The same call had already failed before, and failed again.",
                severity="high",
                evidence=call_evidence(call, step) + call_evidence(first, None))
            target = step.span_id if step is not None else call.span_id
            results.append(rule_fail(judge, target, f"`{tool}` was called again with the arguments that had "
                                                    "just failed.", [issue], tool=tool, call_span_id=call.span_id,
                                     first_failure_span_id=first.span_id))
        if failed(call):
            failures.setdefault(key, call)
    return first_finding(results) if results else [rule_pass(judge, "No failed call was repeated with identical "
                                                             "arguments.")]


# ---------------------------------------------------------------------------------------------------------------
# rule.unbacked_claim

_IRREGULAR = {"send": ("sent",), "pay": ("paid",), "write": ("written", "wrote"), "put": (), "set": (),
              "reset": (), "cancel": ("cancelled", "canceled"), "refund": ("refunded",)}
_ADVERBS = r"(?:(?:now|just|also|already|successfully)\s+)*"


def participles(verb: str) -> tuple[str, ...]:
    """Past participles of a write verb: regular forms and the few irregular ones; ambiguous ones (`set`) none."""
    if verb in _IRREGULAR:
        return _IRREGULAR[verb]
    if verb.endswith("e"):
        return (verb + "d",)
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return (verb[:-1] + "ied",)
    forms = [verb + "ed"]
    if re.fullmatch(r"[a-z]*[^aeiou][aeiou][bdgkmnprt]", verb):
        forms.append(verb + verb[-1] + "ed")  # submit → submitted, drop → dropped
    return tuple(forms)


def _claim_pattern(verbs: frozenset[str]) -> tuple[re.Pattern, dict[str, str]]:
    verb_of = {form: verb for verb in verbs for form in participles(verb)}
    forms = "|".join(sorted(map(re.escape, verb_of), key=len, reverse=True))
    # "has been cancelled", "I have updated", "I've booked", "successfully sent", "is now cancelled"; a negation
    # ("has not been") breaks the chain of words, so it never matches.
    pattern = re.compile(rf"\b(?:(?:has|have|'ve)\s+{_ADVERBS}(?:been\s+)?{_ADVERBS}|successfully\s+|is\s+now\s+)"
                         rf"({forms})\b", re.IGNORECASE)
    return pattern, verb_of


def final_answer(trace: TraceView) -> tuple[SpanView | None, str]:
    """The run's final answer and the span that holds it: the last non-root LLM or AGENT span with text, else the
    root's output."""
    for span in reversed(trace.spans):
        if span.kind in ("LLM", "AGENT") and span.parent_span_id:
            text = plain_text(maybe_json(span.output)).strip()
            if text:
                return span, text
    root = next((s for s in trace.spans if not s.parent_span_id), None)
    return root, plain_text(maybe_json(trace.final_output)).strip()


def rule_unbacked_claim(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.unbacked_claim"
    writes = writes_of(trace)
    if not writes:
        return [rule_pass(judge, "No write tool was called: the final answer is not checked against writes.")]
    verbs = conf.write_tool_verbs()
    done = {verb_of_tool(s.tool_name or s.name) for s in writes if not failed(s)}
    tried = {verb_of_tool(s.tool_name or s.name) for s in writes}
    span, text = final_answer(trace)
    if span is None or not text:
        return [rule_pass(judge, "The run recorded no final answer.")]
    pattern, verb_of = _claim_pattern(verbs)

    def unbacked(verb: str) -> bool:
        # A claimed verb is checked against the writes of that verb the run tried; one no write was tried for
        # ("I've issued a refund" after `create_refund`) is a synonym, unbacked only when no write succeeded at all.
        return verb not in done and (verb in tried or not done)

    claims = [m for m in pattern.finditer(text) if unbacked(verb_of[m.group(1).lower()])]
    if not claims:
        return [rule_pass(judge, "Every action the final answer claims was done by a write that succeeded.")]
    claimed = sorted({verb_of[m.group(1).lower()] for m in claims})
    attempts = [s for s in writes if verb_of_tool(s.tool_name or s.name) in claimed]
    how = (f"The run's {', '.join(sorted({s.tool_name or s.name for s in attempts}))} call(s) failed."
           if attempts else f"No `{'`/`'.join(claimed)}` write was called.")
    index = TraceIndex(trace)
    evidence = [Evidence(span.span_id, clip(claims[0].group(0)))]
    for call in attempts[-1:]:
        evidence += call_evidence(call, deciding_step(call, trace, index))
    issue = JudgeIssue(title="The final answer claims an action that no successful write performed",
                       detail=f"The final answer says \u201c{clip(claims[0].group(0))}\u201d. {how}",
                       severity="high", evidence=evidence)
    return [rule_fail(judge, span.span_id, "The final answer claims a change the run did not make.", [issue],
                      claimed=claimed)]

