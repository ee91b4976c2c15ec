"""Step judge: LLM, TOOL and AGENT spans, batched per window (one call returns one verdict per step).

Each step is shown with its local context only (parent name/kind, brief summaries of the previous two sibling steps,
the trace goal once per call) and with repeated conversation history elided (see render.py), so the cost grows
linearly with the trace, not with its square. Steps are packed greedily in start order into windows of at most
`max_context_tokens` prompt tokens and MAX_STEPS_PER_CALL steps.

Cost split (batched calls): the call's input tokens are split across its steps in proportion to each step's
rendered size, its output tokens in proportion to the size of each step's verdict JSON; each share is priced with
the model's per-token prices, so the steps' tokens and costs add up exactly to the call's. `latency_ms` is the
whole call's wall time on every step of the batch (details["batch_size"] says how many shared it).
"""

from __future__ import annotations

import json

from clear.llm import price_per_token, schema_bounded, schema_max_tokens
from clear.llm_limits import JSON_OBJECT_SCHEMA
from clear.llm_limits import STEP_JUDGE_MAX_TOKENS, STEP_JUDGE_TOKENS_PER_STEP
from diagnosis.judges.contract import JudgeResult, TraceView

from .client import BudgetGate, CallOutcome, call_json
from .config import LlmJudgeConfig
from .prompts import PROMPT_VERSIONS, STEP_JUDGE, SYSTEM_PROMPTS, messages_for, quote_ids, user_message
from .render import JUDGED_KINDS, Block, TraceIndex, cut_to_fit, estimate_tokens, pack, render_span
from .reply_checks import invalid_output_cause, step_item_problems, step_reply_problems
from .verdict_grounding import TraceGrounding, grounded_step_item, step_item_grounding, text_source_details, \
    trace_grounding
from .results import EvidenceFilter, call_details, error_cause, failed, split_evenly
from .schema import STEP_SCHEMA

MAX_STEPS_PER_CALL = 16
OUTPUT_TOKENS_PER_STEP = 250
MIN_DATA_TOKENS = 256


def step_max_tokens(steps: int) -> int:
    """One batched call's output size: the base covers a few verdicts, each further step adds its share."""
    return STEP_JUDGE_MAX_TOKENS + STEP_JUDGE_TOKENS_PER_STEP * max(0, steps - 4)


def step_schema(steps: int, *, span_ids: list[str] | None = None) -> dict:
    """The reply's schema for a batch of `steps`: at most one verdict per step, so that constrained decoding stops
    after the last one (a small model otherwise invents more); a missing one is handled as before. With
    `span_ids` (constrained decoding only): exactly one verdict per step, in the batch's order (a tuple: the model
    otherwise repeats one span id and leaves the others without a verdict)."""
    batch = {**STEP_SCHEMA["properties"]["steps"], "maxItems": steps}
    if span_ids:
        item = batch["items"]
        batch = {"type": "array", "minItems": len(span_ids), "maxItems": len(span_ids), "items": False,
                 "prefixItems": [{**item, "properties": {**item["properties"], "span_id": {"const": span_id}}}
                                 for span_id in span_ids]}
    return {**STEP_SCHEMA, "properties": {**STEP_SCHEMA["properties"], "steps": batch}}


def steps_per_call(config: LlmJudgeConfig) -> int:
    """MAX_STEPS_PER_CALL, or with structured output set to on / json_object_schema the most steps whose longest bounded reply fits under the
    max_tokens ceiling: a grammar-bound reply then always closes before the limit (a small model fills the bounds)."""
    if (config.structured_output or "").lower() not in ("on", JSON_OBJECT_SCHEMA):
        # Only where constrained decoding was asked for (a local server): a capable model under `auto` never fills
        # the bounds, and smaller batches would cost it more calls.
        return MAX_STEPS_PER_CALL
    fits = [n for n in range(1, MAX_STEPS_PER_CALL + 1)
            if schema_max_tokens(schema=schema_bounded(schema=step_schema(n))) <= config.max_tokens]
    return max(fits, default=1)


def judged_steps(trace: TraceView, index: TraceIndex, *, trace_judge: bool) -> list:
    """LLM, TOOL and AGENT spans; the root AGENT span is left to the trace judge when that one runs."""
    return [s for s in trace.spans
            if s.kind in JUDGED_KINDS and not (trace_judge and s.kind == "AGENT" and s.span_id in index.root_ids)]


def _coverage_check(expected: list[str], grounding: TraceGrounding):
    def check(output: dict) -> list[str]:
        seen = [str(item.get("span_id")) for item in output["steps"]]
        missing = [sid for sid in expected if sid not in seen]
        problems = []
        if missing:
            problems.append(f"$.steps: no verdict for span_id(s) {quote_ids(missing)}; give one per step")
        duplicates = sorted({sid for sid in seen if seen.count(sid) > 1})
        if duplicates:
            problems.append(f"$.steps: more than one verdict for span_id(s) {quote_ids(duplicates)}")
        return problems + step_reply_problems(output) + [
            problem for position, item in enumerate(output["steps"]) if isinstance(item, dict)
            for problem in step_item_grounding(item=item, path=f"$.steps[{position}]", grounding=grounding)]

    return check


def run_step_judges(trace: TraceView, index: TraceIndex, config: LlmJudgeConfig, gate: BudgetGate) -> list[JudgeResult]:
    steps = judged_steps(trace, index, trace_judge=config.trace_judge)
    if not steps:
        return []
    goal, goal_cut = cut_to_fit({"goal": trace.goal}, max(MIN_DATA_TOKENS, config.max_context_tokens // 4))
    overhead = estimate_tokens(SYSTEM_PROMPTS[STEP_JUDGE]) + estimate_tokens(user_message(STEP_JUDGE, goal)) + 32
    budget = max(MIN_DATA_TOKENS, config.max_context_tokens - overhead)
    blocks = pack(steps, lambda span, state: render_span(span, index, state, for_step=True),
                  budget_tokens=budget, max_items=steps_per_call(config))
    results: list[JudgeResult] = []
    grounding = trace_grounding(index)
    for number, block in enumerate(blocks, start=1):
        payload = {"goal": goal["goal"], "steps": block.items}
        outcome = call_json(judge=STEP_JUDGE, messages=messages_for(STEP_JUDGE, payload),
                            schema=step_schema(len(block.items)),
                            decoding_schema=step_schema(len(block.items), span_ids=block.span_ids),
                            config=config, gate=gate, check=_coverage_check(block.span_ids, grounding),
                            output_estimate=OUTPUT_TOKENS_PER_STEP * len(block.items),
                            max_tokens=step_max_tokens(len(block.items)))
        results += _block_results(block, number, len(blocks), outcome, config, index, goal_cut, grounding)
    return results


def _block_results(block: Block, number: int, count: int, outcome: CallOutcome, config: LlmJudgeConfig,
                   index: TraceIndex, goal_cut: bool, grounding: TraceGrounding) -> list[JudgeResult]:
    version = PROMPT_VERSIONS[STEP_JUDGE]
    size = len(block.span_ids)
    base = {"batch": number, "batches": count, "batch_size": size, "call_input_tokens": outcome.input_tokens,
            "call_output_tokens": outcome.output_tokens, "call_cost": outcome.cost}
    if outcome.output is None:
        return [failed(STEP_JUDGE, sid, outcome, model=config.model, prompt_version=version, details=base,
                       share=1 / size) for sid in block.span_ids]
    verdicts: dict[str, dict] = {}
    unknown = 0
    for item in outcome.output["steps"]:
        sid = str(item.get("span_id"))
        if sid in block.span_ids and sid not in verdicts:
            verdicts[sid] = item
        else:
            unknown += 1
    in_shares = split_evenly(outcome.input_tokens, [estimate_tokens(item) for item in block.items])
    out_shares = split_evenly(outcome.output_tokens,
                              [len(json.dumps(verdicts.get(sid, {}))) for sid in block.span_ids])
    price = price_per_token(model=config.model, overrides=config.price_overrides) if outcome.input_tokens else None
    results = []
    for position, sid in enumerate(block.span_ids):
        tokens_in, tokens_out = in_shares[position], out_shares[position]
        cost = tokens_in * price[0] + tokens_out * price[1] if price else 0.0
        evidence = EvidenceFilter(set(index.by_id))
        details = {**call_details(outcome), **base}
        if unknown:
            details["verdicts_for_unknown_steps"] = unknown
        item = verdicts.get(sid)
        rejected = step_item_problems(item=item, path="$") if item is not None else []
        if rejected:
            # Still an echo or a contradiction after the repair: this step has no verdict, the batch's others
            # keep theirs.
            result = JudgeResult(judge=STEP_JUDGE, target_span_id=sid, score=None, status="error",
                                 error="invalid judge output after one repair: " + "; ".join(rejected)[:1000])
            details["cause"] = invalid_output_cause(rejected)
        elif item is None:
            result = JudgeResult(judge=STEP_JUDGE, target_span_id=sid, score=None,
                                 status="skipped" if outcome.status == "skipped" else "error",
                                 error=outcome.error or "the judge returned no verdict for this step")
            details.update(error_cause(outcome))
        else:
            truncated = sid in block.truncated or goal_cut
            item, ungrounded = grounded_step_item(item=item, grounding=grounding)
            details.update(text_source_details(ungrounded))
            result = JudgeResult(judge=STEP_JUDGE, target_span_id=sid, status="truncated" if truncated else "ok",
                                 score=float(item["score"]), verdict=item["verdict"],
                                 critique=str(item.get("critique", "")), issues=evidence.issues(item.get("issues")))
            if truncated:
                details["truncated"] = "the span was cut to fit the judge window" if sid in block.truncated \
                    else "the trace goal was cut to fit the judge window"
        details["dropped_unknown_span_evidence"] = evidence.dropped
        result.model, result.prompt_version = config.model, version
        result.input_tokens, result.output_tokens, result.cost = tokens_in, tokens_out, cost
        result.latency_ms, result.cache_key, result.details = outcome.latency_ms, outcome.cache_key, details
        results.append(result)
    return results
