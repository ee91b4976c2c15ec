"""Grounding of generated rubrics (issue 43): a rubric may name only what it was written from.

The generator sees the trace's goal and the names of its agents (nodes) and tools; a rubric is grounded when every
agent, tool or field it names occurs in the goal, those names or the trace's span names, and every value it quotes
occurs in the goal (grounding.py's rules, reused). A reply with an ungrounded rubric is asked for once more with the
reasons; a rubric still ungrounded after that is dropped (a criterion cannot be computed offline, and a rubric about
an agent or tool the trace does not have would turn into a "Rubric not met" statement about nothing), and the
reasons are kept in the generation's result.
"""

from __future__ import annotations

import json

from clear.text_grounding import Evidence, grounding_evidence, grounding_problems
from diagnosis.judges.contract import TraceView

MAX_NAMES = 60  # agents and tools listed to the generator: enough for any agent, bounded for the prompt


def rubric_names(trace: TraceView) -> dict[str, list[str]]:
    """{"agents": [...], "tools": [...]}: the names the generator may use, sorted (a deterministic prompt)."""
    agents = sorted({span.node for span in trace.spans if span.node})[:MAX_NAMES]
    tools = sorted({span.tool_name for span in trace.spans if span.tool_name})[:MAX_NAMES]
    return {"agents": agents, "tools": tools}


def rubric_evidence(*, trace: TraceView, goal, names: dict[str, list[str]]) -> Evidence:
    """What a generated rubric may draw on: the goal it was shown, the agents' and tools' names and the span names
    (names only: the generator never sees the spans' contents, so a quote can only come from the goal)."""
    shown = goal if isinstance(goal, str) else json.dumps(goal, ensure_ascii=False, default=str)
    return grounding_evidence(texts=[shown, *names["agents"], *names["tools"],
                                     *sorted({span.name for span in trace.spans if span.name})])


def _one_rubric_problems(rubric: dict, path: str, evidence: Evidence) -> list[str]:
    return [problem for key in ("name", "text")
            for problem in grounding_problems(path=f"{path}.{key}", text=str(rubric.get(key) or ""),
                                              evidence=evidence)]


def rubric_reply_grounding(*, output: dict, evidence: Evidence) -> list[str]:
    return [problem for position, rubric in enumerate(output.get("rubrics") or []) if isinstance(rubric, dict)
            for problem in _one_rubric_problems(rubric, f"$.rubrics[{position}]", evidence)]


def grounded_rubrics(*, rubrics: list[dict], evidence: Evidence) -> tuple[list[dict], list[dict], list[str]]:
    """(the grounded rubrics, the dropped ones, the reasons they were dropped)."""
    kept, dropped, reasons = [], [], []
    for position, rubric in enumerate(rubrics):
        problems = _one_rubric_problems(rubric, f"$.rubrics[{position}]", evidence)
        if problems:
            dropped.append(rubric)
            reasons += problems
        else:
            kept.append(rubric)
    return kept, dropped, reasons
