"""Features of a step that do not depend on one system's agent names or run lengths (issue 42, point 3), beside the
heuristic's evidence and the position features of learned.py.

Each is read from the trace alone (the steps and, when there is one, the spans: which step issued which tool call):

* the earliest decision a judge failed: the step a failing verdict judged (its target; a tool call's target is
  charged to the step that issued it), the earliest of them, since later failures acted on it; and a failed step
  that another agent's failed decision came before (a consequence more than a cause);
* the step decided a tool call that failed (judges/decision.py `deciding_step`: the model turn or agent that issued
  it; without spans, the preceding actor step), the trace's first failing call, and whether a later call of the same
  tool by the same agent succeeded (recovered: the error was a symptom that went away);
* the step decided a write (a tool whose name starts with a state-changing verb, diagnosis/conf.py), the first one;
* hand-offs: the next actor turn is another agent's (it handed its output on), the previous one was (it acted on
  another agent's output);
* the step's input held an identifier a tool had returned, its output dropped it and another agent acts on that
  output (the hand-off lost a fact; a final answer that leaves ids out is not a hand-off);
* where the step's agent first spoke (relative), and the share of failing verdicts charged to its agent;
* the step's rank among actor turns (relative), and whether it is its agent's last turn.

`EVIDENCE_TEXT` says each in words: the candidates' evidence on the insight page and in the API.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from .steps import Step, author

TRANSFER = ("first_failing_decision", "after_failed_decision", "decides_failing_call", "decides_first_failing_call", "failing_call_recovered", "decides_write",
            "decides_first_write", "handoff_out", "handoff_in", "drops_tool_value", "agent_first_relative",
            "agent_fail_share", "actor_relative", "agent_last_turn")
EVIDENCE_TEXT = {
    "first_failing_decision": "the earliest step a judge failed (what came later acted on it)",
    "after_failed_decision": "another agent's failed decision came before it (it may have followed it)",
    "decides_failing_call": "it issued a tool call that failed",
    "decides_first_failing_call": "it issued the run's first failing call",
    "failing_call_recovered": "a later call of the same tool worked (the error was recovered)",
    "decides_write": "it issued a write (a state-changing call)",
    "decides_first_write": "it issued the run's first write",
    "handoff_out": "it handed its output to another agent",
    "handoff_in": "it acted on another agent's output",
    "drops_tool_value": "its output dropped an identifier a tool had returned to it",
}
_ID = re.compile(r"\b[A-Za-z]{1,6}-\d{2,}\b|\b\d{4,}\b")


def _deciders(steps: list[Step], trace) -> dict[int, int]:
    """tool step position -> position of the step that issued it."""
    by_span = {step.span_id: step.position for step in steps}
    spans, index = {}, None
    if trace is not None:
        try:
            from diagnosis.judges.decision import TraceIndex, deciding_step
        except ImportError:  # the decision-step blame is another module's; without it, the preceding actor decides
            deciding_step = None
        if deciding_step is not None:
            index = TraceIndex(trace)
            spans = index.by_id
    out = {}
    for step in steps:
        if step.is_actor:
            continue
        decider = None
        span = spans.get(step.span_id)
        if span is not None and span.kind == "TOOL":
            found = deciding_step(span, trace, index)
            decider = by_span.get(found.span_id) if found is not None else None
        out[step.position] = decider if decider is not None else author(steps, step.position).position
    return out


def _failed(step: Step) -> bool:
    text = step.text.lstrip()[:200].lower()
    return step.status == "error" or text.startswith(('{"error"', "error:", "error "))


def _is_write(name: str) -> bool:
    from diagnosis import conf
    from diagnosis.judges.contrastive_tasks import is_write_tool

    return bool(name) and is_write_tool(name, conf.write_tool_verbs())


def transfer_rows(*, steps: list[Step], trace=None, failing_positions: list[int] | None = None) -> list[list[float]]:
    """One row of TRANSFER per step. `failing_positions`: the steps failing verdicts judged (their target, else the
    first span they cite)."""
    n = len(steps)
    deciders = _deciders(steps, trace)
    failing_positions = [deciders.get(p, p) for p in failing_positions or []]
    first_failing_decision = min(failing_positions, default=None)
    failed_at = set(failing_positions)
    decided: dict[int, list[Step]] = {}
    for position, decider in deciders.items():
        decided.setdefault(decider, []).append(steps[position])
    failing_calls = [s for s in steps if not s.is_actor and _failed(s)]
    first_failing = deciders.get(failing_calls[0].position) if failing_calls else None
    writes = [s for s in steps if not s.is_actor and _is_write(s.tool_name or s.agent)]
    first_write = deciders.get(writes[0].position) if writes else None
    actors = [s for s in steps if s.is_actor]
    actor_rank = {s.position: i for i, s in enumerate(actors)}
    first_of_agent, last_of_agent = {}, {}
    for s in actors:
        first_of_agent.setdefault(s.agent, s.position)
        last_of_agent[s.agent] = s.position
    blamed = Counter(steps[p].agent for p in failing_positions or [])
    total_blamed = sum(blamed.values())
    rows = []
    for step in steps:
        mine = decided.get(step.position, [])
        failed = [s for s in mine if _failed(s)]
        recovered = any(any(later.position > s.position and (later.tool_name or later.agent) == (s.tool_name or s.agent)
                            and not _failed(later) for later in steps) for s in failed)
        rank = actor_rank.get(step.position)
        before = actors[rank - 1] if rank else None
        after = actors[rank + 1] if rank is not None and rank + 1 < len(actors) else None
        rows.append([
            float(step.position == first_failing_decision),
            float(step.position in failed_at and any(p < step.position and steps[p].agent != step.agent
                                                     for p in failed_at)),
            math.log1p(len(failed)), float(step.is_actor and first_failing == step.position), float(recovered),
            float(any(_is_write(s.tool_name or s.agent) for s in mine)),
            float(step.is_actor and first_write == step.position),
            float(after is not None and after.agent != step.agent), float(before is not None and before.agent != step.agent),
            float(after is not None and after.agent != step.agent and _drops(step, steps)),
            first_of_agent.get(step.agent, step.position) / max(1, n - 1),
            blamed.get(step.agent, 0) / total_blamed if total_blamed else 0.0,
            rank / max(1, len(actors) - 1) if rank is not None else 0.0,
            float(step.is_actor and last_of_agent.get(step.agent) == step.position),
        ])
    return rows


def _drops(step: Step, steps: list[Step]) -> bool:
    """A model turn whose prompt held an identifier an earlier tool returned, and whose output does not."""
    if step.kind != "LLM" or not step.input_text or not step.text:
        return False
    returned = set()
    for earlier in steps[:step.position]:
        if not earlier.is_actor:
            returned |= set(_ID.findall(earlier.text))
    held = {value for value in _ID.findall(step.input_text) if value in returned}
    return bool(held - set(_ID.findall(step.text)))


def transfer_evidence(row: list[float]) -> list[str]:
    """The row's evidence in words (the features that are set and say something on their own)."""
    return [text for name, text in EVIDENCE_TEXT.items() if row[TRANSFER.index(name)] > 0]
