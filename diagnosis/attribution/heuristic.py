"""Offline attribution: which step of a failed trace is the decisive mistake, without a model.

Every actor step (an agent's or a model's turn; tool results are charged to the turn that issued the call) gets a
score from independent pieces of evidence, and the highest score wins (ties: the earlier step). The weights encode
what the Who&When study found about failed multi-agent runs rather than anything fitted to its labels:

* The decisive mistake is usually early and everything after builds on it, so there is a prior that decreases
  with the position (`PRIOR`). The first turn often carries the plan; a wrong plan dooms the run.
* Invented data is the most common decisive mistake of these systems: a turn that says it assumes, simulates,
  mocks or illustrates with hypothetical / sample / placeholder values (`FABRICATION`, the first such turn only;
  later ones continue it), or that states many new figures with no code and no source (`UNSUPPORTED`).
* The final answer is wrong (the trace failed), so the turn where its key values first appear introduced the
  error (`PROVENANCE`); a value first printed by a tool is charged to the turn that wrote the code.
* Judges' feedback: the LLM trace judge's root cause is strong evidence (`ROOT_CAUSE`), failing step verdicts
  moderate; an executor error is a symptom charged to the turn that wrote the code, stronger when nothing later
  recovered from it; loops and repeated calls weakly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .steps import Step, author

PRIOR = 0.8
FABRICATION = 1.5
FABRICATION_LATER = 0.3
ASSUMPTION = 0.3
PROVENANCE = 1.2
PROVENANCE_FINAL = 0.3
UNSUPPORTED = 0.6
UNSUPPORTED_MIN_VALUES = 3
ROOT_CAUSE = 3.0
STEP_FAIL = {"critical": 1.0, "high": 0.8, "medium": 0.5, "low": 0.2}
TOOL_ERROR = 0.4
TOOL_ERROR_UNRECOVERED = 0.4
LOOP = 0.3
OTHER_FAIL = 0.3
TRIVIAL = {"", "terminate", "terminate."}

_STRONG = re.compile(
    r"\b(hypothetical(?:ly)?|mock(?:ed|ing|up)?|simulat(?:e|ed|es|ing|ion)|dummy|placeholder|fictional|fictitious|"
    r"made[- ]up|sample data|example data|synthetic data|for (?:demonstration|illustration)(?: purposes)?|"
    r"illustrative|for the sake of (?:this|the) (?:example|demonstration|illustration)|let'?s pretend)\b",
    re.IGNORECASE)
_WEAK = re.compile(r"\b(assum(?:e|ed|ing|ption)s?|let'?s say|approximat(?:e|ely|ion))\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
_BOLD = re.compile(r"\*\*([^*\n]{1,80})\*\*|\\boxed\{([^{}]{1,80})\}")
_CODE = re.compile(r"```")
_BROWSED = re.compile(r"^\s*(?:Address:|Title:|Viewport position:|A (?:Bing|Google) search for)", re.IGNORECASE)


@dataclass(slots=True)
class FeedbackSignal:
    """One judge's finding, reduced to what attribution uses (built from Feedback rows or JudgeResults)."""

    judge: str
    span_id: str | None
    verdict: str | None
    severity: str = "medium"
    root_cause_span_id: str | None = None
    evidence_span_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Decision:
    step: Step | None
    confidence: float
    reason: str
    candidates: list[dict]  # the top candidates with their scores and reasons


def _numbers(text: str) -> set[str]:
    values = set()
    for raw in _NUMBER.findall(text):
        value = raw.replace(",", "").rstrip(".")
        if value.endswith(".0"):
            value = value[:-2]
        if value.strip("-"):
            values.add(value)
    return values


def _final_values(text: str, goal: str) -> set[str]:
    """Key values of a final answer: multi-digit numbers, and bold / boxed phrases near the end."""
    goal_numbers, goal_low = _numbers(goal), goal.lower()
    values = {n for n in _numbers(text) if len(n.strip("-")) >= 2 and n not in goal_numbers}
    tail_start = max(0, len(text) - 500)
    for match in _BOLD.finditer(text):
        if match.start() < tail_start:
            continue
        phrase = (match.group(1) or match.group(2) or "").strip().strip(":").strip()
        if not phrase or phrase.lower() in goal_low or _heading(text, match):
            continue
        numbers = _numbers(phrase)
        if numbers and len(phrase) <= 20:
            values |= {n for n in numbers if n not in goal_numbers}
        elif len(phrase) >= 3 and not phrase.endswith(":"):
            values.add(phrase.lower())
    return values


def _heading(text: str, match: re.Match) -> bool:
    """A bold label rather than a value: "**Verification**:", "**Output**" alone on its line."""
    after = text[match.end():match.end() + 2]
    line_start = text.rfind("\n", 0, match.start()) + 1
    line_end = text.find("\n", match.end())
    line = text[line_start:len(text) if line_end < 0 else line_end].strip()
    alone = line == match.group(0).strip() and not any(ch.isdigit() for ch in match.group(0))
    return after.startswith(":") or match.group(0).endswith(":**") or alone


def _contains(step: Step, value: str) -> bool:
    if value[:1].isdigit() or value[:1] == "-":
        return value in _numbers(step.text)
    return value in step.text.lower()


def _substantive(step: Step) -> bool:
    return step.is_actor and step.text.strip().lower() not in TRIVIAL


class _Board:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.scores: dict[int, float] = {}
        self.reasons: dict[int, list[tuple[float, str]]] = {}
        self.kinds: dict[int, dict[str, float]] = {}  # what each piece of evidence was (the learned method's inputs)

    def add(self, position: int, weight: float, why: str, kind: str = "other") -> None:
        target = author(self.steps, position).position
        self.scores[target] = self.scores.get(target, 0.0) + weight
        self.reasons.setdefault(target, []).append((weight, why))
        kinds = self.kinds.setdefault(target, {})
        kinds[kind] = kinds.get(kind, 0.0) + weight


def _feedback(board: _Board, steps: list[Step], signals: list[FeedbackSignal]) -> None:
    by_span = {step.span_id: step.position for step in steps}
    for signal in signals:
        if signal.root_cause_span_id and signal.root_cause_span_id in by_span:
            board.add(by_span[signal.root_cause_span_id], ROOT_CAUSE, f"{signal.judge} named it the root cause",
                      "root_cause")
        if signal.verdict != "fail":
            continue
        cited = [signal.span_id] if signal.span_id else []
        cited += [s for s in signal.evidence_span_ids if s not in cited]
        cited = [by_span[s] for s in cited if s in by_span]
        if not cited:
            continue
        first = min(cited)
        if signal.span_id in by_span and steps[by_span[signal.span_id]].is_actor:
            # The judge judged that turn: its evidence (an earlier tool reply the turn dropped, say) is what it had
            # in front of it, not who went wrong.
            first = by_span[signal.span_id]
        if signal.judge in ("rule.exit_code", "rule.span_error", "rule.tool_error") and not steps[first].is_actor:
            later_ok = any(not s.is_actor and s.agent == steps[first].agent and s.status != "error"
                           for s in steps[first + 1:])
            board.add(first, TOOL_ERROR, f"the code it issued failed ({signal.judge})", "tool_error")
            if not later_ok:
                board.add(first, TOOL_ERROR_UNRECOVERED, "and no later run recovered", "tool_error_unrecovered")
        elif signal.judge == "llm.step" or signal.judge.startswith("llm."):
            board.add(first, STEP_FAIL.get(signal.severity, 0.5), f"{signal.judge} failed it", "step_fail")
        elif signal.judge in ("rule.loop", "rule.repeated_tool_call"):
            board.add(first, LOOP, f"{signal.judge}: it repeated itself", "loop")
        else:
            board.add(first, OTHER_FAIL, f"{signal.judge} failed it", "other_fail")


def _text(board: _Board, steps: list[Step], goal: str) -> None:
    actors = [s for s in steps if _substantive(s)]
    fabricated = False
    seen_numbers = _numbers(goal)
    for step in steps:
        numbers = _numbers(step.text)
        if _substantive(step):
            strong = _STRONG.search(step.text)
            if strong and not fabricated:
                board.add(step.position, FABRICATION, f"it works with invented data ({strong.group(0)!r})", "fabrication")
                fabricated = True
            elif strong:
                board.add(step.position, FABRICATION_LATER, f"it keeps using invented data ({strong.group(0)!r})",
                          "fabrication_later")
            elif _WEAK.search(step.text):
                board.add(step.position, ASSUMPTION, f"it assumes ({_WEAK.search(step.text).group(0)!r})", "assumption")
            new = {n for n in numbers - seen_numbers if len(n.strip("-")) >= 2}
            if len(new) >= UNSUPPORTED_MIN_VALUES and not _CODE.search(step.text) and not _BROWSED.match(step.text):
                board.add(step.position, UNSUPPORTED, f"it states {len(new)} new figures without code or a source",
                          "unsupported")
        seen_numbers |= numbers
    if not actors:
        return
    final = actors[-1]
    values = _final_values(final.text, goal)
    firsts = []
    for value in values:
        first = next((s.position for s in steps[:final.position + 1] if _contains(s, value)), None)
        if first is not None:
            firsts.append((first, value))
    if firsts:
        first, value = min(firsts)
        if author(steps, first).position < final.position:
            board.add(first, PROVENANCE, f"the final answer's value {value[:40]!r} first appears here", "provenance")
        else:
            board.add(first, PROVENANCE_FINAL, "the final answer is first stated here", "provenance_final")


EVIDENCE_KINDS = ("prior", "root_cause", "tool_error", "tool_error_unrecovered", "step_fail", "loop", "other_fail",
                  "fabrication", "fabrication_later", "assumption", "unsupported", "provenance", "provenance_final")


def _board(steps: list[Step], goal: str, signals: list[FeedbackSignal]) -> _Board:
    board = _Board(steps)
    candidates = [s for s in steps if _substantive(s)] or [s for s in steps if s.is_actor] or list(steps)
    for step in candidates:
        board.scores.setdefault(step.position, 0.0)
        board.kinds.setdefault(step.position, {})
        prior = PRIOR * (1 - step.position / len(steps))
        board.scores[step.position] += prior
        board.kinds[step.position]["prior"] = prior
        board.reasons.setdefault(step.position, []).append((prior, "early in the run"))
    _feedback(board, steps, signals)
    _text(board, steps, goal)
    return board


def step_evidence(*, steps: list[Step], goal: str = "", signals: list[FeedbackSignal] | None = None
                  ) -> dict[int, dict[str, float]]:
    """position -> evidence kind -> weight, for every candidate step (and every step evidence was charged to): the
    heuristic's pieces of evidence kept apart, for the learned method (learned.py) to weigh."""
    return step_evidence_and_reasons(steps=steps, goal=goal, signals=signals)[0]


def step_evidence_and_reasons(*, steps: list[Step], goal: str = "", signals: list[FeedbackSignal] | None = None
                              ) -> tuple[dict[int, dict[str, float]], dict[int, list[str]]]:
    """step_evidence, and position -> the evidence in words, strongest first (a candidate's evidence when the
    attribution is not sure)."""
    if not steps:
        return {}, {}
    board = _board(steps, goal, signals or [])
    reasons = {position: [why for _, why in sorted(found, key=lambda r: -r[0]) if why != "early in the run"]
               for position, found in board.reasons.items()}
    return board.kinds, reasons


def attribute_heuristic(*, steps: list[Step], goal: str = "", signals: list[FeedbackSignal] | None = None) -> Decision:
    if not steps:
        return Decision(step=None, confidence=0.0, reason="the trace has no steps", candidates=[])
    board = _board(steps, goal, signals or [])
    ranked = sorted(board.scores.items(), key=lambda item: (-item[1], item[0]))
    best_position, best_score = ranked[0]
    exps = [math.exp(score - best_score) for _, score in ranked]
    confidence = round(1 / sum(exps), 3)
    best = steps[best_position]
    reasons = [why for weight, why in sorted(board.reasons.get(best_position, []), key=lambda r: -r[0])
               if why != "early in the run"] or ["earliest substantive turn; no other evidence"]
    reason = f"{best.label}: " + "; ".join(reasons[:3])
    top = [{"step": steps[p].index, "span_id": steps[p].span_id, "agent": steps[p].agent, "score": round(s, 3),
            "reasons": [why for _, why in board.reasons.get(p, [])]} for p, s in ranked[:5]]
    return Decision(step=best, confidence=confidence, reason=reason[:480], candidates=top)
