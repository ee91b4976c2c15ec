"""One structured judge call: cache → budget → the shared LLM client (clear/llm.py) → schema → one repair.

* Cache key: sha256 of canonical JSON {judge, prompt_version, model, messages} — exactly what the model sees. A hit
  (re-validated) makes no model call and costs nothing this run; its original usage is kept in `cached_usage`.
* Retries, the output cap, structured output, JSON parsing and the one repair request are clear.llm's
  (connection errors, 5xx, 429s and timeouts retried; each call's `max_tokens` is its kind's size under the
  config's ceiling; invalid output gets exactly one repair carrying the error; still invalid → status "error" with
  the error text, which the caller never turns into a score). A failed call's `cause` (clear/llm_errors.py) goes
  with its error into the result's details["cause"].
* Budget: asked before each request (the conversation's estimated tokens + the expected reply), charged after it
  with the tokens and cost it used, failed requests included.
* Cost: tokens × the price table (price_overrides, else LiteLLM's); an unknown model costs 0 and says so in
  `cost_note`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from clear.llm import Check, LlmReply, LlmUsage, cost_usd, llm_complete, llm_json_complete, tokens_estimate
from clear.llm_errors import llm_error_cause
from clear.text_grounding import GROUNDING_MARK

from .config import LlmJudgeConfig
from .prompts import PROMPT_VERSIONS
from .reply_checks import invalid_output_cause
from .schema import validate

BUDGET_EXHAUSTED = "budget exhausted"


@dataclass
class CallOutcome(LlmUsage):
    status: str = "ok"  # ok | error | skipped
    output: dict | None = None  # schema-valid output (set even when `check` still failed after repair)
    error: str = ""
    cause: str = ""  # why it failed (clear/llm_errors.py CAUSES); empty unless status is "error"
    cost: float = 0.0
    latency_ms: float = 0.0
    cache_key: str = ""
    cache_hit: bool = False
    repaired: bool = False
    cached_usage: dict | None = None


class BudgetGate:
    """Stops every later call of one judge_trace_with_llm run once the budget has said no.

    An exception raised by the caller's budget (e.g. "the run was cancelled") is remembered in `raised` so that
    judge_trace_with_llm lets it through instead of turning it into error results."""

    def __init__(self, budget) -> None:
        self.budget = budget
        self.exhausted = False
        self.raised: BaseException | None = None

    def allow(self, tokens: int) -> bool:
        if self.exhausted:
            return False
        if self.budget is not None:
            try:
                allowed = self.budget.allow(tokens)
            except BaseException as error:
                self.raised = error
                raise
            self.exhausted = not allowed
        return not self.exhausted

    def spend(self, tokens: int, cost: float) -> None:
        if self.budget is not None and tokens:
            try:
                self.budget.spend(tokens, cost)
            except BaseException as error:
                self.raised = error
                raise


class _BudgetSaidNo(Exception):
    """Ends the conversation before a request the budget would not allow."""


def cache_key(judge: str, model: str, messages: list[dict]) -> str:
    material = {"judge": judge, "prompt_version": PROMPT_VERSIONS[judge], "model": model, "messages": messages}
    encoded = json.dumps(material, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def _schema_then(schema: dict, check: Check | None, outcome: CallOutcome) -> Check:
    """The reply's problems: schema errors first, then (on a schema-valid reply, kept as the output) the check's."""

    def problems(value: dict) -> list[str]:
        errors = validate(value, schema)
        if errors:
            return errors
        outcome.output = value
        return check(value) if check else []

    return problems


def _cached(outcome: CallOutcome, config: LlmJudgeConfig, schema: dict, check: Check | None) -> bool:
    if config.cache_get is None:
        return False
    try:
        hit = config.cache_get(outcome.cache_key)
    except Exception as error:  # noqa: BLE001 - a broken cache is a miss, not a failed judge
        outcome.notes.append(f"cache read failed: {type(error).__name__}")
        return False
    if not (isinstance(hit, dict) and isinstance(hit.get("output"), dict)):
        return False
    if validate(hit["output"], schema) or (check and check(hit["output"])):
        return False
    outcome.output, outcome.cache_hit = hit["output"], True
    outcome.cached_usage = {k: hit.get(k) for k in ("input_tokens", "output_tokens", "cost", "model")}
    return True


def call_json(*, judge: str, messages: list[dict], schema: dict, config: LlmJudgeConfig, gate: BudgetGate,
              check: Check | None = None, output_estimate: int = 1000, max_tokens: int | None = None,
              decoding_schema: dict | None = None) -> CallOutcome:
    """`max_tokens`: this kind of call's output size (capped by the config's ceiling; None: the ceiling).
    `decoding_schema`: a stricter schema for constrained decoding only (e.g. this batch's span ids); replies are
    validated against `schema`, so a model without structured output keeps the lenient rules."""
    outcome = CallOutcome(cache_key=cache_key(judge, config.model, messages))
    if _cached(outcome, config, schema, check):
        return outcome
    endpoint = config.endpoint(max_tokens=max_tokens)

    def complete(conversation: list[dict]) -> LlmReply:
        if not gate.allow(tokens_estimate(conversation) + output_estimate):
            raise _BudgetSaidNo()
        calls_before, tokens_before = outcome.calls, outcome.input_tokens + outcome.output_tokens
        try:
            return llm_complete(endpoint=endpoint, messages=conversation, usage=outcome,
                                schema=decoding_schema or schema, schema_name=judge)
        finally:
            _charge(outcome, gate, config, tokens_before, outcome.calls - calls_before)

    started = time.perf_counter()
    try:
        reply = llm_json_complete(messages=messages, complete=complete, check=_schema_then(schema, check, outcome))
    except _BudgetSaidNo:
        outcome.status, outcome.error = "skipped", BUDGET_EXHAUSTED
        return outcome
    except Exception as error:  # noqa: BLE001 - any provider error becomes an "error" result
        if error is gate.raised:
            raise  # the caller's budget stopped the run: judge_trace_with_llm lets it through
        outcome.status, outcome.cause = "error", llm_error_cause(error=error)
        outcome.error = f"{type(error).__name__}: {str(error)[:500]}"
        return outcome
    finally:
        outcome.latency_ms = round((time.perf_counter() - started) * 1000, 1)
    fatal = [problem for problem in reply.problems if GROUNDING_MARK not in problem]
    if reply.problems and not fatal:
        # Only texts that are not grounded: the verdict stands, the caller drops or replaces those texts
        # (verdict_grounding.py) and says so in the result.
        # Not cached: a cache hit is checked again, and would be asked again anyway.
        outcome.notes.append("texts not grounded in the trace after the repair: replaced (details['ungrounded'])")
        return outcome
    if reply.problems:
        # An echo or a contradiction has its own cause, so a run can say its model copies the prompt.
        outcome.status, outcome.cause = "error", invalid_output_cause(reply.problems)
        outcome.error = "invalid judge output after one repair: " + "; ".join(reply.problems)[:1000]
        return outcome
    outcome.repaired = reply.repaired
    _store(config, outcome)
    return outcome


def _charge(outcome: CallOutcome, gate: BudgetGate, config: LlmJudgeConfig, tokens_before: int,
            new_calls: int) -> None:
    """Recompute the cost from the running token totals and spend this round's tokens on the budget."""
    previous_cost = outcome.cost
    cost = cost_usd(model=config.model, input_tokens=outcome.input_tokens, output_tokens=outcome.output_tokens,
                    overrides=config.price_overrides)
    if cost is None:
        note = f"no price known for model {config.model!r}: cost recorded as 0"
        if note not in outcome.notes:
            outcome.notes.append(note)
        cost = 0.0
    outcome.cost = cost
    tokens = outcome.input_tokens + outcome.output_tokens - tokens_before
    if new_calls:
        gate.spend(tokens, outcome.cost - previous_cost)


def _store(config: LlmJudgeConfig, outcome: CallOutcome) -> None:
    if config.cache_put is None or outcome.output is None:
        return
    try:
        config.cache_put(outcome.cache_key, {
            "output": outcome.output, "input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens,
            "cost": outcome.cost, "model": config.model, "repaired": outcome.repaired,
        })
    except Exception as error:  # noqa: BLE001 - the verdict stands even if it could not be cached
        outcome.notes.append(f"cache write failed: {type(error).__name__}")
