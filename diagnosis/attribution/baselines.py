"""Label-free baselines for failure attribution (issue 29): what any method has to beat.

Agents: the most active agent (most actor turns; ties: the one that spoke first), the agent of the first failing
verdict (the turn the earliest failing judge result cites, charged to the turn that issued it), the last agent before
the outcome (the last actor turn). Steps: the first step, the step of the first failing verdict, the last step (the
last actor turn). A baseline with nothing to go on (no failing verdict) names nothing, which scores as wrong.
"""

from __future__ import annotations

from collections import Counter

from .heuristic import FeedbackSignal
from .steps import Step, author

AGENT_BASELINES = ("most_active_agent", "first_failing_verdict_agent", "last_agent")
STEP_BASELINES = ("first_step", "first_failing_verdict_step", "last_step")
BASELINE_NAMES = {
    "most_active_agent": "the most active agent", "first_failing_verdict_agent": "the agent of the first failing verdict",
    "last_agent": "the last agent before the outcome", "first_step": "the first step",
    "first_failing_verdict_step": "the step of the first failing verdict", "last_step": "the last step",
}


def first_failing_step(steps: list[Step], signals: list[FeedbackSignal]) -> Step | None:
    """The earliest step a failing verdict cites (its target, else its evidence), charged to its author."""
    by_span = {step.span_id: step.position for step in steps}
    cited = []
    for signal in signals:
        if signal.verdict != "fail":
            continue
        spans = ([signal.span_id] if signal.span_id else []) + list(signal.evidence_span_ids)
        cited += [by_span[s] for s in spans if s in by_span]
    return author(steps, min(cited)) if cited else None


def baseline_answers(*, steps: list[Step], signals: list[FeedbackSignal]) -> dict[str, str | int | None]:
    """baseline name -> its answer: an agent name for the agent baselines, a step index for the step ones."""
    actors = [step for step in steps if step.is_actor] or list(steps)
    if not actors:
        return {name: None for name in AGENT_BASELINES + STEP_BASELINES}
    counts = Counter(step.agent for step in actors)
    first_seen = {}
    for step in actors:
        first_seen.setdefault(step.agent, step.position)
    most_active = min(counts, key=lambda agent: (-counts[agent], first_seen[agent]))
    failing = first_failing_step(steps, signals)
    return {
        "most_active_agent": most_active,
        "first_failing_verdict_agent": failing.agent if failing else None,
        "last_agent": actors[-1].agent,
        "first_step": steps[0].index,
        "first_failing_verdict_step": failing.index if failing else None,
        "last_step": actors[-1].index,
    }
