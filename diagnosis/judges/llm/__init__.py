"""LLM judges (DESIGN §5) via LiteLLM with validated JSON output: step, trace and rubric judges.

    from diagnosis.judges.llm import LlmJudgeConfig, judge_trace_with_llm
    results = judge_trace_with_llm(trace=trace_view, rubrics=[{"id": "r1", "name": ..., "text": ...}],
                                   config=LlmJudgeConfig(model="openai/gpt-4o-mini"))

Returns JudgeResults (diagnosis/judges/contract.py):
* "llm.trace" (target None): overall score/verdict, feedback as critique, issues, and in details the per-dimension
  scores, the outcome assessment, the root cause (node, span id, reason; required when the outcome is a failure),
  the number of windows and the running summary of a long trace;
* "rubric.<id>" (target None), one per rubric — the caller's and, with generated_rubrics, "gen-1".."gen-5" —
  evaluated in the trace judge's call: score 1 pass / 0 fail / None uncertain;
* "llm.step" (target = span id), one per LLM, TOOL and AGENT span (the root AGENT span is the trace judge's);
* "rubric.generated" only when rubric generation failed, was skipped (no goal), or some generated rubrics were
  dropped for naming what neither the goal nor the trace holds (status "skipped", the reasons in
  details["ungrounded"]; rubric_grounding.py).

A judge that fails returns status "error" (or "skipped" with error "budget exhausted"), score None, never 0.
Exceptions raised by the caller's budget object (a cancelled run) propagate; cache callbacks that raise are
treated as a miss / a failed write.
Calls per trace: ceil(steps / window) step calls + 1 trace call (+ 1 per extra window of a very long trace,
+ 1 rubric generation when enabled); repairs (one at most per call) and 429/timeout retries come on top.
The judges run sequentially inside one trace; run traces concurrently (CLEAR_JUDGE_CONCURRENCY threads).
"""

from __future__ import annotations

from diagnosis.judges.contract import JudgeResult, TraceView

from .client import BUDGET_EXHAUSTED, BudgetGate, cache_key
from .config import Budget, LlmJudgeConfig
from .prompts import PROMPT_VERSIONS, RUBRIC_GEN_JUDGE, STEP_JUDGE, SYSTEM_PROMPTS, TRACE_JUDGE, WINDOW_JUDGE
from .render import TraceIndex
from .step import judged_steps, run_step_judges
from .trace import run_trace_judge

__all__ = [
    "BUDGET_EXHAUSTED",
    "Budget",
    "LlmJudgeConfig",
    "PROMPT_VERSIONS",
    "RUBRIC_GEN_JUDGE",
    "STEP_JUDGE",
    "SYSTEM_PROMPTS",
    "TRACE_JUDGE",
    "WINDOW_JUDGE",
    "cache_key",
    "judge_trace_with_llm",
]


def judge_trace_with_llm(*, trace: TraceView, rubrics: list[dict], config: LlmJudgeConfig) -> list[JudgeResult]:
    index = TraceIndex.build(trace)
    gate = BudgetGate(config.budget)
    rubrics = list(rubrics or [])
    results: list[JudgeResult] = []
    if config.trace_judge:
        try:
            results += run_trace_judge(trace, index, rubrics, config, gate)
        except Exception as error:  # noqa: BLE001 - a judge bug must not take the diagnosis run down
            if error is gate.raised:
                raise  # the caller's budget stopped the run: not a judge failure
            results += [_crashed(TRACE_JUDGE, None, error, config)] + [
                _crashed(f"rubric.{r.get('id')}", None, error, config) for r in rubrics]
    else:
        for rubric in rubrics:
            results.append(JudgeResult(
                judge=f"rubric.{rubric.get('id')}", target_span_id=None, status="skipped", model=config.model,
                prompt_version=PROMPT_VERSIONS[TRACE_JUDGE], error="rubrics are evaluated by the trace judge, "
                "which is disabled", details={"rubric": dict(rubric)}))
    if config.step_judges:
        try:
            results += run_step_judges(trace, index, config, gate)
        except Exception as error:  # noqa: BLE001
            if error is gate.raised:
                raise
            results += [_crashed(STEP_JUDGE, s.span_id, error, config)
                        for s in judged_steps(trace, index, trace_judge=config.trace_judge)]
    return results


def _crashed(judge: str, target: str | None, error: Exception, config: LlmJudgeConfig) -> JudgeResult:
    version = PROMPT_VERSIONS[STEP_JUDGE if judge == STEP_JUDGE else TRACE_JUDGE]
    return JudgeResult(judge=judge, target_span_id=target, status="error", model=config.model,
                       prompt_version=version, error=f"judge crashed: {type(error).__name__}: {str(error)[:300]}")
