"""The three LLM attribution methods of the Who&When paper, through the LLM judges' call helper.

* all_at_once: one call with the whole log → agent, step, reason.
* step_by_step: one call per step in order ("is this step the decisive mistake?") with the log up to it; stops at
  the first yes (k + 1 calls when step k is named; n calls and "inconclusive" when no step is).
* binary_search: ceil(log2(n)) calls, each asking which half of the remaining range holds the mistake, then one
  call naming the responsible agent of the step it narrowed down to.

Each call goes through `call_json` (diagnosis/judges/llm/client.py): transient failures retried, JSON
validated against the method's schema (plus checks: step numbers and agent names must exist in the log), exactly
one repair request, and then status "error" — an invalid reply is recorded as an error, never as an answer.
A tool step named as the decisive one is charged to the turn that issued the call (steps.author).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from clear.llm_limits import ATTRIBUTION_MAX_TOKENS
from diagnosis.judges.llm.client import BudgetGate, CallOutcome, call_json
from diagnosis.judges.llm.config import LlmJudgeConfig
from diagnosis.judges.llm.render import CHARS_PER_TOKEN, cut_middle

from .prompts import ALL_AT_ONCE, BINARY_NAME, BINARY_SEARCH, SCHEMAS, STEP_BY_STEP, VERSIONS, messages_for
from .steps import Step, author

METHODS = {"all_at_once": ALL_AT_ONCE, "step_by_step": STEP_BY_STEP, "binary_search": BINARY_SEARCH}
GOAL_CHARS = 4000
MIN_STEP_CHARS = 300
CONTEXT_BRIEF_CHARS = 160
NAME_CONTEXT_STEPS = 2


@dataclass
class LlmAttribution:
    status: str = "ok"  # ok | inconclusive | error
    step: Step | None = None
    agent: str = ""
    reason: str = ""
    confidence: float | None = None
    error: str = ""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    prompt_version: str = ""
    details: dict = field(default_factory=dict)

    def add(self, outcome: CallOutcome) -> None:
        self.calls += outcome.calls
        self.input_tokens += outcome.input_tokens
        self.output_tokens += outcome.output_tokens
        self.cost += outcome.cost
        if outcome.repaired:
            self.details["repairs"] = self.details.get("repairs", 0) + 1
        for note in outcome.notes:
            notes = self.details.setdefault("notes", [])
            if note not in notes:
                notes.append(note)

    def fail(self, outcome: CallOutcome, where: str) -> "LlmAttribution":
        self.status, self.step, self.agent = "error", None, ""
        self.error = f"{where}: {outcome.error or 'the call failed'}"[:1000]
        if outcome.status != "skipped":  # a budget stop is not a failed model call
            self.details["cause"] = outcome.cause or "invalid_output"
        return self


class _Renderer:
    def __init__(self, goal: str, steps: list[Step], config: LlmJudgeConfig) -> None:
        self.goal = cut_middle(goal, GOAL_CHARS)
        self.steps = steps
        self.budget_chars = int(config.max_context_tokens * CHARS_PER_TOKEN) - len(self.goal) - 3000

    def render(self, steps: list[Step]) -> list[dict]:
        per_step = max(MIN_STEP_CHARS, self.budget_chars // max(1, len(steps)))
        items = []
        for step in steps:
            item = {"step": step.index, "agent": step.agent, "kind": step.kind, "status": step.status}
            if step.input_text and step.kind != "AGENT":
                item["input"] = cut_middle(step.input_text, per_step // 2)
            item["content"] = cut_middle(step.text, per_step)
            items.append(item)
        return items

    def context(self, steps: list[Step]) -> list[dict]:
        return [{"step": s.index, "agent": s.agent, "brief": cut_middle(" ".join(s.text.split()), CONTEXT_BRIEF_CHARS)}
                for s in steps]


def _agents(steps: list[Step]) -> dict[str, str]:
    return {step.agent.casefold(): step.agent for step in steps if step.agent}


def _agent_check(agents: dict[str, str]):
    def check(output: dict) -> list[str]:
        if str(output.get("agent", "")).strip().casefold() not in agents:
            return ['$.agent: not an agent of this log; use exactly one of the names in the steps\' "agent" fields']
        return []

    return check


def _call(method: str, payload: dict, config: LlmJudgeConfig, gate: BudgetGate, check=None) -> CallOutcome:
    return call_json(judge=method, messages=messages_for(method, payload), schema=SCHEMAS[method], config=config,
                     gate=gate, check=check, output_estimate=300, max_tokens=ATTRIBUTION_MAX_TOKENS)


def all_at_once(goal: str, steps: list[Step], config: LlmJudgeConfig) -> LlmAttribution:
    result = LlmAttribution(prompt_version=VERSIONS[ALL_AT_ONCE])
    renderer, agents = _Renderer(goal, steps, config), _agents(steps)
    by_index = {step.index: step for step in steps}
    agent_check = _agent_check(agents)

    def check(output: dict) -> list[str]:
        problems = agent_check(output)
        if output.get("step") not in by_index:
            problems.append(f"$.step: not a step number of this log (the steps are numbered {min(by_index)} to "
                            f"{max(by_index)})")
        return problems

    outcome = _call(ALL_AT_ONCE, {"goal": renderer.goal, "steps": renderer.render(steps)}, config,
                    BudgetGate(config.budget), check)
    result.add(outcome)
    if outcome.status != "ok":
        return result.fail(outcome, "all-at-once call")
    output = outcome.output
    result.step = by_index[output["step"]]
    result.agent = agents[str(output["agent"]).strip().casefold()]
    result.reason = str(output["reason"])
    result.confidence = _confidence(output)
    return result


def step_by_step(goal: str, steps: list[Step], config: LlmJudgeConfig) -> LlmAttribution:
    result = LlmAttribution(prompt_version=VERSIONS[STEP_BY_STEP])
    renderer, gate = _Renderer(goal, steps, config), BudgetGate(config.budget)
    reviewed = []
    for position, step in enumerate(steps):
        payload = {"goal": renderer.goal, "review_step": step.index, "steps": renderer.render(steps[:position + 1])}
        outcome = _call(STEP_BY_STEP, payload, config, gate)
        result.add(outcome)
        if outcome.status != "ok":
            result.details["reviewed"] = reviewed
            return result.fail(outcome, f"step-by-step call for step {step.index}")
        reviewed.append({"step": step.index, "decisive": outcome.output["decisive"]})
        if outcome.output["decisive"]:
            responsible = author(steps, position)
            result.step, result.agent = responsible, responsible.agent
            result.reason = str(outcome.output["reason"]) or f"step {step.index} judged decisive"
            if responsible is not step:
                result.details["named_step"] = step.index
            result.details["reviewed"] = reviewed
            return result
    result.status, result.details["reviewed"] = "inconclusive", reviewed
    result.reason = "no step was judged to be the decisive mistake"
    return result


def binary_search(goal: str, steps: list[Step], config: LlmJudgeConfig) -> LlmAttribution:
    result = LlmAttribution(prompt_version=f"{VERSIONS[BINARY_SEARCH]}+{VERSIONS[BINARY_NAME]}")
    renderer, gate, agents = _Renderer(goal, steps, config), BudgetGate(config.budget), _agents(steps)
    low, high, path = 0, len(steps) - 1, []
    while low < high:
        middle = (low + high) // 2
        payload = {"goal": renderer.goal, "context_before": renderer.context(steps[:low]),
                   "steps": renderer.render(steps[low:high + 1]),
                   "first_half": [steps[low].index, steps[middle].index],
                   "second_half": [steps[middle + 1].index, steps[high].index]}
        outcome = _call(BINARY_SEARCH, payload, config, gate)
        result.add(outcome)
        if outcome.status != "ok":
            result.details["path"] = path
            return result.fail(outcome, f"binary-search call over steps {steps[low].index}-{steps[high].index}")
        half = outcome.output["half"]
        path.append({"range": [steps[low].index, steps[high].index], "half": half})
        low, high = (low, middle) if half == "first" else (middle + 1, high)
    result.details["path"] = path
    decisive = steps[low]
    shown = steps[max(0, low - NAME_CONTEXT_STEPS):low + 1]
    payload = {"goal": renderer.goal, "decisive_step": decisive.index, "steps": renderer.render(shown)}
    outcome = _call(BINARY_NAME, payload, config, gate, _agent_check(agents))
    result.add(outcome)
    if outcome.status != "ok":
        return result.fail(outcome, f"naming call for step {decisive.index}")
    named = str(outcome.output["agent"]).strip().casefold()
    result.agent = agents[named]
    result.step = decisive
    if not decisive.is_actor and result.agent.casefold() != decisive.agent.casefold():
        # The model blamed the agent behind a tool result: point at that agent's turn.
        owner = author(steps, low)
        if owner.agent.casefold() == named:
            result.details["named_step"], result.step = decisive.index, owner
    result.reason = str(outcome.output["reason"])
    result.confidence = _confidence(outcome.output)
    return result


def expected_binary_calls(step_count: int) -> int:
    return (math.ceil(math.log2(step_count)) if step_count > 1 else 0) + 1


def _confidence(output: dict) -> float | None:
    value = output.get("confidence")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


RUNNERS = {"all_at_once": all_at_once, "step_by_step": step_by_step, "binary_search": binary_search}


def attribute_with_llm(*, method: str, goal: str, steps: list[Step], config: LlmJudgeConfig) -> LlmAttribution:
    if not steps:
        return LlmAttribution(status="inconclusive", reason="the trace has no steps",
                              prompt_version=VERSIONS[METHODS[method]])
    return RUNNERS[method](goal, steps, config)
