"""Trace judge (with the rubrics in the same call) and the optional rubric generator.

The whole trajectory is rendered compactly (history elided, see render.py). If it does not fit in one prompt of
`max_context_tokens`, it is read in windows: every window but the last goes to the window judge, which returns an
updated running summary (plus the issues it sees); the last window goes to the trace judge together with that
summary. Only a span that alone exceeds a window is cut, and then the results are marked "truncated".

Token accounting: the trace result carries the tokens/cost of all trace/window calls; rubric results evaluated in
that call carry none (details["evaluated_in"] says so); generated-rubric results share the generation call equally.
"""

from __future__ import annotations

from clear.llm_limits import (RUBRIC_GEN_MAX_TOKENS, TRACE_JUDGE_MAX_TOKENS, TRACE_JUDGE_TOKENS_PER_RUBRIC,
                              WINDOW_JUDGE_MAX_TOKENS)
from diagnosis.judges.contract import JudgeIssue, JudgeResult, TraceView

from .client import BudgetGate, CallOutcome, call_json
from .config import LlmJudgeConfig
from .prompts import (PROMPT_VERSIONS, RUBRIC_GEN_JUDGE, SYSTEM_PROMPTS, TRACE_JUDGE, WINDOW_JUDGE, messages_for,
                      quote_ids, user_message)
from .render import Block, TraceIndex, cut_middle, cut_to_fit, estimate_tokens, pack, render_span
from .reply_checks import reply_problems
from .rubric_grounding import grounded_rubrics, rubric_evidence, rubric_names, rubric_reply_grounding
from .verdict_grounding import (TraceGrounding, grounded_trace_output, text_source_details, trace_grounding,
                                trace_reply_grounding)
from .results import EvidenceFilter, call_details, error_cause, failed, skipped
from .schema import RUBRIC_GEN_SCHEMA, TRACE_SCHEMA, WINDOW_SCHEMA

SUMMARY_RESERVE_TOKENS = 700
SUMMARY_MAX_CHARS = 2400
TRACE_OUTPUT_TOKENS = 1500
MIN_DATA_TOKENS = 256
GENERATED_JUDGE = "rubric.generated"
RUBRIC_SCORES = {"pass": 1.0, "fail": 0.0, "uncertain": None}


def _rubric_items(rubrics: list[dict]) -> list[dict]:
    items = []
    for position, rubric in enumerate(rubrics, start=1):
        rid = str(rubric.get("id") if rubric.get("id") not in (None, "") else f"r{position}")
        items.append({"id": rid, "name": str(rubric.get("name") or rid), "text": str(rubric.get("text") or ""),
                      "node": rubric.get("node") or None})
    return items


def generate_rubrics(trace: TraceView, config: LlmJudgeConfig,
                     gate: BudgetGate) -> tuple[list[dict], list[JudgeResult]]:
    """(generated rubric items, results to report only when generation failed or was skipped)."""
    version = PROMPT_VERSIONS[RUBRIC_GEN_JUDGE]
    if trace.goal in (None, "", [], {}):
        return [], [skipped(GENERATED_JUDGE, None, "the trace has no goal to derive rubrics from",
                            model=config.model, prompt_version=version)]
    goal, _ = cut_to_fit({"goal": trace.goal}, max(MIN_DATA_TOKENS, config.max_context_tokens // 2))
    names = rubric_names(trace)
    evidence = rubric_evidence(trace=trace, goal=goal["goal"], names=names)
    outcome = call_json(judge=RUBRIC_GEN_JUDGE, messages=messages_for(RUBRIC_GEN_JUDGE, {**goal, **names}),
                        schema=RUBRIC_GEN_SCHEMA, config=config, gate=gate, output_estimate=400,
                        check=lambda output: (reply_problems(judge=RUBRIC_GEN_JUDGE, output=output)
                                              + rubric_reply_grounding(output=output, evidence=evidence)),
                        max_tokens=RUBRIC_GEN_MAX_TOKENS)
    if outcome.status != "ok" or outcome.output is None:
        return [], [failed(GENERATED_JUDGE, None, outcome, model=config.model, prompt_version=version)]
    kept, dropped, reasons = grounded_rubrics(rubrics=outcome.output["rubrics"], evidence=evidence)
    items = [{"id": f"gen-{n}", "name": r["name"], "text": r["text"], "node": None, "_generated": outcome}
             for n, r in enumerate(kept, start=1)]
    if not dropped:
        return items, []
    # Still ungrounded after the repair: dropped, and said so (a skip, not an error: the kept rubrics are judged).
    note = skipped(GENERATED_JUDGE, None, f"{len(dropped)} of {len(outcome.output['rubrics'])} generated rubrics "
                   "named what neither the goal nor the trace contains; dropped", model=config.model,
                   prompt_version=version, details={**call_details(outcome), "ungrounded": reasons[:20],
                                                    "dropped": [str(r.get("name", "")) for r in dropped]})
    return items, [note]


def _trace_check(rubric_ids: list[str], span_ids: set[str], recorded_outcome: str | None,
                 grounding: TraceGrounding):
    def check(output: dict) -> list[str]:
        problems = []
        seen = [str(r.get("id")) for r in output["rubrics"]]
        missing = [rid for rid in rubric_ids if rid not in seen]
        if missing:
            problems.append(f"$.rubrics: no entry for rubric id(s) {quote_ids(missing)}")
        needs_cause = recorded_outcome == "failure" or output["outcome_assessment"] == "failure"
        cause = output["root_cause"]
        if needs_cause and cause is None:
            problems.append("$.root_cause: required when the outcome is a failure")
        if cause is not None and str(cause.get("span_id")) not in span_ids:
            problems.append("$.root_cause.span_id: not a span_id of this trace")
        return (problems + reply_problems(judge=TRACE_JUDGE, output=output)
                + trace_reply_grounding(output=output, grounding=grounding))

    return check


DECODING_SPAN_IDS = 500  # a root cause's span id is chosen from the trace's spans when there are no more than this


def trace_schema(rubrics: int, *, rubric_ids: list[str] | None = None, span_ids: list[str] | None = None) -> dict:
    """The reply's schema with at most one entry per rubric shown, so that constrained decoding stops there. With
    `rubric_ids` / `span_ids` (constrained decoding only): the rubric entries in order, the root cause naming one of
    the trace's spans (the checks after the reply refuse anything else)."""
    properties = dict(TRACE_SCHEMA["properties"])
    properties["rubrics"] = {**properties["rubrics"], "maxItems": rubrics}
    if rubric_ids:
        item = properties["rubrics"]["items"]
        properties["rubrics"] = {
            "type": "array", "minItems": len(rubric_ids), "maxItems": len(rubric_ids), "items": False,
            "prefixItems": [{**item, "properties": {**item["properties"], "id": {"const": rid}}} for rid in rubric_ids]}
    if span_ids and len(span_ids) <= DECODING_SPAN_IDS:
        cause = properties["root_cause"]
        properties["root_cause"] = {**cause, "properties": {**cause["properties"],
                                                             "span_id": {"type": "string", "enum": list(span_ids)}}}
    return {**TRACE_SCHEMA, "properties": properties}


def run_trace_judge(trace: TraceView, index: TraceIndex, rubrics: list[dict], config: LlmJudgeConfig,
                    gate: BudgetGate) -> list[JudgeResult]:
    results: list[JudgeResult] = []
    items = _rubric_items(rubrics)
    if config.generated_rubrics:
        generated, gen_results = generate_rubrics(trace, config, gate)
        items += generated
        results += gen_results
    shown = [{k: v for k, v in item.items() if not k.startswith("_")} for item in items]
    header, header_cut = cut_to_fit(
        {"goal": trace.goal, "final_output": trace.final_output, "recorded_outcome": trace.outcome},
        max(MIN_DATA_TOKENS, config.max_context_tokens // 4))
    fixed = estimate_tokens(user_message(TRACE_JUDGE, {"trace": header, "rubrics": shown})) + 48
    system = max(estimate_tokens(SYSTEM_PROMPTS[TRACE_JUDGE]), estimate_tokens(SYSTEM_PROMPTS[WINDOW_JUDGE]))

    def render(span, state):
        return render_span(span, index, state, for_step=False)

    budget = max(MIN_DATA_TOKENS, config.max_context_tokens - system - fixed)
    blocks = pack(trace.spans, render, budget_tokens=budget, max_items=10**6)
    if len(blocks) > 1:  # leave room for the running summary and the window marker
        budget = max(MIN_DATA_TOKENS, budget - SUMMARY_RESERVE_TOKENS)
        blocks = pack(trace.spans, render, budget_tokens=budget, max_items=10**6)
    blocks = blocks or [Block()]  # a trace without spans is still judged (from its goal and final output)

    evidence = EvidenceFilter(set(index.by_id))
    grounding = trace_grounding(index)
    window_issues: list[JudgeIssue] = []
    outcomes: list[CallOutcome] = []
    summary: str | None = None
    truncated = [sid for block in blocks for sid in block.truncated]
    notes = ["the trace goal or final output was cut to fit the judge window"] if header_cut else []
    for number, block in enumerate(blocks, start=1):
        last = number == len(blocks)
        payload = {"trace": header, "rubrics": shown, "running_summary": summary, "steps": block.items}
        if len(blocks) > 1:
            payload["window"] = {"number": number, "of": len(blocks)}
        if last:
            outcome = call_json(judge=TRACE_JUDGE, messages=messages_for(TRACE_JUDGE, payload),
                                schema=trace_schema(len(items)),
                                decoding_schema=trace_schema(len(items), rubric_ids=[str(i["id"]) for i in items],
                                                             span_ids=sorted(index.by_id)),
                                config=config, gate=gate, output_estimate=TRACE_OUTPUT_TOKENS,
                                max_tokens=TRACE_JUDGE_MAX_TOKENS + TRACE_JUDGE_TOKENS_PER_RUBRIC * len(items),
                                check=_trace_check([i["id"] for i in items], set(index.by_id), trace.outcome,
                                                   grounding))
        else:
            outcome = call_json(judge=WINDOW_JUDGE, messages=messages_for(WINDOW_JUDGE, payload),
                                schema=WINDOW_SCHEMA, config=config, gate=gate, output_estimate=600,
                                check=lambda output: reply_problems(judge=WINDOW_JUDGE, output=output),
                                max_tokens=WINDOW_JUDGE_MAX_TOKENS)
        outcomes.append(outcome)
        if outcome.status != "ok":
            return results + _failed_trace(outcome, outcomes, items, config, number, len(blocks))
        if not last:
            summary = outcome.output["summary"]
            if len(summary) > SUMMARY_MAX_CHARS:
                summary = cut_middle(summary, SUMMARY_MAX_CHARS)
                notes.append(f"the running summary of window {number} was cut")
            window_issues += evidence.issues(outcome.output.get("issues"))
    output, ungrounded = grounded_trace_output(output=outcomes[-1].output, grounding=grounding, index=index)
    status = "truncated" if (truncated or notes) else "ok"
    trace_result = _trace_result(output, outcomes, evidence, window_issues, config, status)
    trace_result.details.update(text_source_details(ungrounded))
    if trace_result.details["root_cause"] and any(".root_cause." in reason for reason in ungrounded):
        trace_result.details["root_cause"]["text_source"] = "computed"
    trace_result.details.update({"windows": len(blocks), "truncated_spans": truncated,
                                 "running_summary": summary, "rubrics_evaluated": len(items)})
    if notes:
        trace_result.details["truncation_notes"] = notes
    results.append(trace_result)
    results += _rubric_results(output, items, evidence, trace_result, config, status)
    trace_result.details["dropped_unknown_span_evidence"] = evidence.dropped
    return results


def _totals(outcomes: list[CallOutcome]) -> dict:
    return {
        "input_tokens": sum(o.input_tokens for o in outcomes),
        "output_tokens": sum(o.output_tokens for o in outcomes),
        "cost": sum(o.cost for o in outcomes),
        "latency_ms": round(sum(o.latency_ms for o in outcomes), 1),
    }


def _call_summary(outcomes: list[CallOutcome]) -> dict:
    details = call_details(outcomes[-1])
    details["calls"] = sum(o.calls for o in outcomes)
    details["cache_hit"] = all(o.cache_hit for o in outcomes)
    details["repaired"] = any(o.repaired for o in outcomes)
    details["cache_keys"] = [o.cache_key for o in outcomes]
    return details


def _failed_trace(outcome: CallOutcome, outcomes: list[CallOutcome], items: list[dict], config: LlmJudgeConfig,
                  number: int, count: int) -> list[JudgeResult]:
    version = PROMPT_VERSIONS[TRACE_JUDGE]
    result = failed(TRACE_JUDGE, None, outcome, model=config.model, prompt_version=version,
                    details={"failed_window": number, "windows": count})
    for key, value in _totals(outcomes).items():
        setattr(result, key, value)
    result.details.update(_call_summary(outcomes))
    rubric_results = [
        JudgeResult(judge=f"rubric.{item['id']}", target_span_id=None, status=result.status, model=config.model,
                    prompt_version=version, error=result.error,
                    details={"rubric": {k: v for k, v in item.items() if not k.startswith("_")},
                             "generated": "_generated" in item, "evaluated_in": TRACE_JUDGE,
                             **error_cause(outcome)})
        for item in items
    ]
    return [result] + rubric_results


def _trace_result(output: dict, outcomes: list[CallOutcome], evidence: EvidenceFilter, window_issues: list,
                  config: LlmJudgeConfig, status: str) -> JudgeResult:
    issues = evidence.issues(output.get("issues"))
    titles = {issue.title.lower() for issue in issues}
    issues += [issue for issue in window_issues if issue.title.lower() not in titles]
    cause = output.get("root_cause")
    details = {
        "dimensions": {name: {"score": float(d["score"]), "justification": str(d["justification"])}
                       for name, d in output["dimensions"].items()},
        "outcome_assessment": output["outcome_assessment"],
        "root_cause": {"node": str(cause.get("node", "")), "span_id": str(cause["span_id"]),
                       "reason": str(cause.get("reason", ""))} if cause else None,
        **_call_summary(outcomes),
    }
    return JudgeResult(judge=TRACE_JUDGE, target_span_id=None, status=status, score=float(output["score"]),
                       verdict=output["verdict"], critique=str(output["feedback"]), issues=issues,
                       model=config.model, prompt_version=PROMPT_VERSIONS[TRACE_JUDGE],
                       cache_key=outcomes[-1].cache_key, details=details, **_totals(outcomes))


def _rubric_results(output: dict, items: list[dict], evidence: EvidenceFilter, trace_result: JudgeResult,
                    config: LlmJudgeConfig, status: str) -> list[JudgeResult]:
    by_id = {}
    for entry in output["rubrics"]:
        by_id.setdefault(str(entry.get("id")), entry)
    generated = [item for item in items if "_generated" in item]
    results = []
    for item in items:
        entry = by_id[item["id"]]
        verdict = entry["verdict"]
        justification = str(entry.get("justification", ""))
        quotes = evidence.evidence(entry.get("evidence"))
        issues = [JudgeIssue(title=f"Rubric not met: {item['name']}", detail=justification, severity="medium",
                             evidence=quotes)] if verdict == "fail" else []
        version = PROMPT_VERSIONS[TRACE_JUDGE]
        details = {"rubric": {k: v for k, v in item.items() if not k.startswith("_")},
                   "generated": "_generated" in item, "evaluated_in": TRACE_JUDGE, "evidence": [
                       {"span_id": e.span_id, "quote": e.quote} for e in quotes]}
        result = JudgeResult(judge=f"rubric.{item['id']}", target_span_id=None, status=status,
                             score=RUBRIC_SCORES[verdict], verdict=verdict, critique=justification, issues=issues,
                             model=config.model, prompt_version=version, cache_key=trace_result.cache_key,
                             latency_ms=trace_result.latency_ms, details=details)
        if "_generated" in item:
            gen: CallOutcome = item["_generated"]
            share = 1 / len(generated)
            result.prompt_version = f"{version}+{PROMPT_VERSIONS[RUBRIC_GEN_JUDGE]}"
            result.input_tokens = round(gen.input_tokens * share)
            result.output_tokens = round(gen.output_tokens * share)
            result.cost = gen.cost * share
            details.update({"generation_cache_key": gen.cache_key, "generation": call_details(gen),
                            "text_source": "model"})
        results.append(result)
    return results
