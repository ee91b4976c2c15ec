"""Repetition rules. `rule.repeated_tool_call` reports the same tool called with identical, non-empty arguments at
least REPEATED_CALL_THRESHOLD times under one parent (a single retry after a back-off is normal, so 2 is not
reported). `rule.loop` reports a speaker (agent, tool without arguments, or model) emitting the identical non-empty
message in back-to-back sibling spans. The same message recurring after other turns is not reported: in group chats
that is mostly a harness's canned reply ("There is no code from the last 1 message…") or a re-run that printed the
same output, neither evidence of a fault on its own; the LLM trace judge sees those.

A repeated call is blamed on the step that decided the first repeat (judges/decision.py: it had the first call's
reply in front of it), citing that step, each call's arguments and the reply it repeated after; without a known
decider, on the calls' parent.
"""

from __future__ import annotations

from collections import defaultdict

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.decision import TraceIndex, agent_of, call_evidence, clip_quote, deciding_step, reply_of
from diagnosis.judges.rules.verdicts import clip, rule_fail, rule_pass
from diagnosis.judges.text import dump, error_payload, maybe_json, normalise, plain_text

REPEATED_CALL_THRESHOLD = 3


def rule_repeated_tool_call(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.repeated_tool_call"
    groups: dict[tuple[str, str, str], list[SpanView]] = defaultdict(list)
    for span in trace.spans:
        if span.kind != "TOOL" or span.input in (None, "", {}, []):
            continue
        arguments = dump(maybe_json(span.input))
        groups[(span.parent_span_id, span.tool_name or span.name, arguments)].append(span)
    ids, index = {span.span_id for span in trace.spans}, TraceIndex(trace)
    by_target: dict[str | None, list[JudgeIssue]] = defaultdict(list)
    counts: dict[str | None, int] = defaultdict(int)
    for (parent_id, tool, arguments), spans in groups.items():
        if len(spans) < REPEATED_CALL_THRESHOLD:
            continue
        step = deciding_step(spans[1], trace, index)
        target = step.span_id if step is not None else parent_id if parent_id in ids else None
        failed = sum(1 for s in spans if s.status == "error" or error_payload(s.output))
        reply = reply_of(spans[0])
        detail = f"{tool}({arguments}) was sent {len(spans)} times by " \
            + (agent_of(step) if step is not None else "the same caller")
        cited = call_evidence(spans[0], step)[:1] if step is not None else []  # the step, naming the tool
        by_target[target].append(JudgeIssue(
            title=f"{tool} called {len(spans)} times with identical arguments",
            detail=detail + (f"; {failed} of the calls failed" if failed else "")
            + (f"; the first reply was `{clip_quote(reply)}`" if reply else "") + ".",
            severity="high" if len(spans) >= 5 or failed == len(spans) else "medium",
            evidence=cited + [Evidence(s.span_id, dump(maybe_json(s.input))) for s in spans]
            + ([Evidence(spans[0].span_id, clip(reply))] if reply else []),
        ))
        counts[target] = max(counts[target], len(spans))
    results = [
        rule_fail(judge, target, "The same tool call was repeated instead of changing course.",
                  issues, max_repeats=counts[target])
        for target, issues in by_target.items()
    ]
    return results or [rule_pass(judge, f"No tool call was repeated {REPEATED_CALL_THRESHOLD}+ times identically.")]


def _speaker(span: SpanView) -> tuple[str, str]:
    if span.kind == "TOOL":
        return span.kind, span.tool_name or span.name
    return span.kind, span.node or span.name


def rule_loop(trace: TraceView, stats: dict | None = None) -> list[JudgeResult]:
    judge = "rule.loop"
    siblings: dict[str, list[SpanView]] = defaultdict(list)
    for span in trace.spans:
        siblings[span.parent_span_id].append(span)  # trace.spans is in start order
    results = []
    for children in siblings.values():
        i = 0
        while i < len(children):
            first = children[i]
            message = _loop_message(first)
            j = i + 1
            while message and j < len(children) and _speaker(children[j]) == _speaker(first) \
                    and _loop_message(children[j]) == message:
                j += 1
            if j - i >= 2:
                repeated = children[i:j]
                quote = clip(plain_text(first.output))
                issue = JudgeIssue(
                    title=f"{_speaker(first)[1]} repeated the same message {len(repeated)} times in a row",
                    detail="Back-to-back identical messages from one speaker: the conversation is not progressing.",
                    severity="high" if len(repeated) >= 3 else "medium",
                    evidence=[Evidence(s.span_id, quote) for s in repeated],
                )
                results.append(rule_fail(judge, repeated[1].span_id, "A speaker repeated itself back to back.", [issue],
                                     repeats=len(repeated), speaker=_speaker(first)[1]))
            i = j
    return results or [rule_pass(judge, "No speaker repeated the same message back to back.")]


def _loop_message(span: SpanView) -> str:
    # Tool calls with arguments are rule.repeated_tool_call's; their identical results are not a second finding.
    if span.kind == "TOOL" and span.input not in (None, "", {}, []):
        return ""
    return normalise(plain_text(span.output))
