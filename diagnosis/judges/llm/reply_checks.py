"""What a schema-valid judge reply must also satisfy before it becomes a verdict (issue 43): no field copies the prompt
(clear/text_echo.py), none declines instead of judging (clear/text_refusal.py), and every verdict agrees with its score.

Consistency rule: "fail" ⇒ score ≤ 0.5, "pass" ⇒ score ≥ 0.5 ("uncertain" takes any score; 0.5 is "partly wrong"
on the prompts' scale, so it may go with either). A reply breaking either rule gets the one repair request with the
reasons; still broken, the call's cause is `invalid_output:echo`, `invalid_output:refusal` or
`invalid_output:inconsistent`
(`invalid_output_cause`), and the step judge keeps the batch's other steps: only the offending step is an error.
"""

from __future__ import annotations

from functools import lru_cache

from clear.llm_errors import ECHO, INCONSISTENT, INVALID_OUTPUT, REFUSAL
from clear.text_echo import ECHO_MARK, EchoReference, echo_problems, echo_reference, text_fields
from clear.text_grounding import GROUNDING_MARK
from clear.text_refusal import REFUSAL_MARK, refusal_problems

from .prompts import (RUBRIC_GEN_EXAMPLE, RUBRIC_GEN_JUDGE, STEP_EXAMPLE, STEP_JUDGE, SYSTEM_PROMPTS, TRACE_EXAMPLE,
                      TRACE_JUDGE, WINDOW_EXAMPLE, WINDOW_JUDGE)

FAIL_MAX_SCORE = 0.5
PASS_MIN_SCORE = 0.5
INCONSISTENT_MARK = "contradicts its score"  # in every consistency problem: invalid_output_cause reads it
# The reply templates of the v1 prompts, whose values were descriptions: models that saw them (or any template like
# them) still write them back, and they are no more a finding now than they were then.
TEMPLATE_DESCRIPTIONS = (
    "short label of one problem", "what went wrong and why it matters", "2-4 sentences",
    "4-8 sentences: what the agent did, what went wrong, why", "1-2 sentences", "1-3 sentences",
    "why this span made the task fail", "short name", "the testable criterion",
    "verbatim excerpt of that span's text, at most 200 characters",
    "the updated running summary of everything so far, at most 250 words: the agent's progress toward the goal, "
    "errors and suspicious steps with their span_ids and nodes, and facts needed to check the rubrics",
)
_EXAMPLES = {STEP_JUDGE: STEP_EXAMPLE, TRACE_JUDGE: TRACE_EXAMPLE, WINDOW_JUDGE: WINDOW_EXAMPLE,
             RUBRIC_GEN_JUDGE: RUBRIC_GEN_EXAMPLE}


@lru_cache(maxsize=None)
def judge_reference(judge: str) -> EchoReference:
    """The echo reference of one judge's prompt: its system message, every text of its example reply and the former
    templates' descriptions."""
    example = [text for _, text in text_fields(_EXAMPLES[judge])]
    return echo_reference(texts=[SYSTEM_PROMPTS[judge], *example, *TEMPLATE_DESCRIPTIONS])


def verdict_problems(*, item: dict, path: str) -> list[str]:
    verdict, score = item.get("verdict"), item.get("score")
    if not isinstance(score, (int, float)) or isinstance(score, bool):
        return []
    if verdict == "fail" and score > FAIL_MAX_SCORE:
        return [f"{path}.verdict: \"fail\" {INCONSISTENT_MARK} {score} (a failing verdict has a score of at most "
                f"{FAIL_MAX_SCORE}); give the verdict and score this data supports"]
    if verdict == "pass" and score < PASS_MIN_SCORE:
        return [f"{path}.verdict: \"pass\" {INCONSISTENT_MARK} {score} (a passing verdict has a score of at least "
                f"{PASS_MIN_SCORE}); give the verdict and score this data supports"]
    return []


def step_item_problems(*, item: dict, path: str) -> list[str]:
    """Echoes, refusals and a contradiction in one step verdict of the step judge's reply."""
    fields = list(text_fields(item, path=path))
    return (echo_problems(fields=fields, reference=judge_reference(STEP_JUDGE)) + refusal_problems(fields=fields)
            + verdict_problems(item=item, path=path))


def step_reply_problems(output: dict) -> list[str]:
    return [problem for position, item in enumerate(output.get("steps") or []) if isinstance(item, dict)
            for problem in step_item_problems(item=item, path=f"$.steps[{position}]")]


def reply_problems(*, judge: str, output: dict) -> list[str]:
    """The trace, window and rubric-generation replies: echoes and refusals anywhere, and the trace verdict's
    consistency."""
    if judge == STEP_JUDGE:
        return step_reply_problems(output)
    fields = list(text_fields(output))
    problems = echo_problems(fields=fields, reference=judge_reference(judge)) + refusal_problems(fields=fields)
    if judge == TRACE_JUDGE:
        problems += verdict_problems(item=output, path="$")
    return problems


def invalid_output_cause(problems: list[str]) -> str:
    """The cause of a reply still rejected after its repair: plain invalid output (schema, coverage) first, then an
    echo, then a refusal, then a contradiction. Ungrounded texts (clear/text_grounding.py) are no cause: alone they
    never fail a call, and beside an echo they must not hide it."""
    kinds = [ECHO if ECHO_MARK in p else REFUSAL if REFUSAL_MARK in p else INCONSISTENT if INCONSISTENT_MARK in p
             else INVALID_OUTPUT for p in problems if GROUNDING_MARK not in p]
    for cause in (INVALID_OUTPUT, ECHO, REFUSAL, INCONSISTENT):
        if cause in kinds:
            return cause
    return INVALID_OUTPUT
