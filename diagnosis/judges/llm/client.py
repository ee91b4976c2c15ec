"""One structured judge call: cache → budget → LiteLLM (retries on 429/timeouts only) → JSON → schema → one repair.

* Cache key: sha256 of canonical JSON {judge, prompt_version, model, messages} — exactly what the model sees. A hit
  (re-validated) makes no model call and costs nothing this run; its original usage is kept in `cached_usage`.
* Retries: `litellm.RateLimitError` (429) and `litellm.Timeout` only, at most `max_retries`, waiting Retry-After
  (seconds or HTTP date; `retry-after-ms` too) when the provider sends it, else exponential backoff with jitter.
  Every other error fails the call at once. LiteLLM's and the OpenAI SDK's own retries are switched off.
* Invalid output (not JSON, or schema / check errors): exactly one repair request carrying the error; still invalid
  → status "error" with the error text (the caller never turns that into a score).
* Cost: tokens × the price table (price_overrides, else `litellm.model_cost`, looked up with and without the
  provider prefix); an unknown model costs 0 and says so in `cost_note`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Callable

from .config import LlmJudgeConfig
from .prompts import PROMPT_VERSIONS, REPAIR_TEMPLATE
from .render import estimate_tokens
from .schema import validate

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 120.0
BUDGET_EXHAUSTED = "budget exhausted"
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

Check = Callable[[dict], list[str]]


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def sleep(seconds: float) -> None:  # module-level so tests can speed it up
    time.sleep(seconds)


@dataclass
class CallOutcome:
    status: str = "ok"  # ok | error | skipped
    output: dict | None = None  # schema-valid output (set even when `check` still failed after repair)
    error: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    latency_ms: float = 0.0
    cache_key: str = ""
    cache_hit: bool = False
    calls: int = 0  # HTTP requests made, retries included
    repaired: bool = False
    notes: list[str] = field(default_factory=list)
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


def cache_key(judge: str, model: str, messages: list[dict]) -> str:
    material = {"judge": judge, "prompt_version": PROMPT_VERSIONS[judge], "model": model, "messages": messages}
    encoded = json.dumps(material, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def price_per_token(model: str, overrides: dict | None) -> tuple[float, float] | None:
    if overrides and model in overrides:
        price_in, price_out = overrides[model]
        return float(price_in), float(price_out)
    table = _litellm().model_cost
    for name in (model, model.split("/", 1)[-1]):
        entry = table.get(name)
        if entry and "input_cost_per_token" in entry:
            return float(entry.get("input_cost_per_token") or 0.0), float(entry.get("output_cost_per_token") or 0.0)
    return None


def _retry_after(error: Exception) -> float | None:
    headers = getattr(error, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(error, "response", None), "headers", None)
    if not headers:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, AttributeError):
        return None


def _parse(content: str) -> tuple[dict | None, str]:
    text = (content or "").strip()
    match = _FENCE.match(text)
    if match:
        text = match.group(1)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"the reply is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
    if not isinstance(value, dict):
        return None, "the reply must be one JSON object"
    return value, ""


def _request(config: LlmJudgeConfig, messages: list[dict], outcome: CallOutcome) -> tuple[str, str]:
    """(content, finish_reason) of one completion, retrying 429s and timeouts; raises on other errors."""
    litellm = _litellm()
    attempt = 0
    while True:
        attempt += 1
        outcome.calls += 1
        try:
            response = litellm.completion(
                model=config.model, messages=messages, api_base=config.api_base, api_key=config.api_key,
                response_format={"type": "json_object"}, temperature=0, timeout=config.timeout,
                num_retries=0, max_retries=0, drop_params=True,
            )
        except (litellm.RateLimitError, litellm.Timeout) as error:
            if attempt > config.max_retries:
                raise
            wait = _retry_after(error)
            if wait is None:
                wait = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
            sleep(min(wait, RETRY_AFTER_MAX_S))
            continue
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        content = response.choices[0].message.content or ""
        if prompt is None or completion is None:
            outcome.notes.append("provider reported no token usage: estimated")
            prompt = estimate_tokens(messages)
            completion = estimate_tokens(content)
        outcome.input_tokens += int(prompt)
        outcome.output_tokens += int(completion)
        return content, getattr(response.choices[0], "finish_reason", "") or ""


def _problems(value: dict | None, parse_error: str, schema: dict, check: Check | None) -> tuple[list[str], bool]:
    """(problems, schema_ok)."""
    if value is None:
        return [parse_error], False
    errors = validate(value, schema)
    if errors:
        return errors, False
    extra = check(value) if check else []
    return extra, True


def call_json(*, judge: str, messages: list[dict], schema: dict, config: LlmJudgeConfig, gate: BudgetGate,
              check: Check | None = None, output_estimate: int = 1000) -> CallOutcome:
    outcome = CallOutcome(cache_key=cache_key(judge, config.model, messages))
    if config.cache_get is not None:
        try:
            hit = config.cache_get(outcome.cache_key)
        except Exception as error:  # noqa: BLE001 - a broken cache is a miss, not a failed judge
            hit = None
            outcome.notes.append(f"cache read failed: {type(error).__name__}")
        if isinstance(hit, dict) and isinstance(hit.get("output"), dict):
            problems, schema_ok = _problems(hit["output"], "", schema, check)
            if schema_ok and not problems:
                outcome.output, outcome.cache_hit = hit["output"], True
                outcome.cached_usage = {k: hit.get(k) for k in ("input_tokens", "output_tokens", "cost", "model")}
                return outcome

    started = time.perf_counter()
    conversation = list(messages)
    try:
        for round_no in (1, 2):
            if not gate.allow(estimate_tokens(conversation) + output_estimate):
                outcome.status, outcome.error = "skipped", BUDGET_EXHAUSTED
                return outcome
            calls_before, tokens_before = outcome.calls, outcome.input_tokens + outcome.output_tokens
            try:
                content, finish_reason = _request(config, conversation, outcome)
            except Exception as error:  # noqa: BLE001 - any provider error becomes an "error" result
                outcome.status = "error"
                outcome.error = f"{type(error).__name__}: {str(error)[:500]}"
                return outcome
            finally:
                _charge(outcome, gate, config, tokens_before, outcome.calls - calls_before)
            value, parse_error = _parse(content)
            if finish_reason == "length" and value is None:
                parse_error += " (the reply was cut off by the output token limit: be more concise)"
            problems, schema_ok = _problems(value, parse_error, schema, check)
            if schema_ok:
                outcome.output = value
            if not problems:
                outcome.repaired = round_no == 2
                _store(config, outcome)
                return outcome
            if round_no == 1:
                error_text = "; ".join(problems)[:1500]
                conversation += [{"role": "assistant", "content": content[:20000]},
                                 {"role": "user", "content": REPAIR_TEMPLATE.format(error=error_text)}]
        outcome.status = "error"
        outcome.error = "invalid judge output after one repair: " + "; ".join(problems)[:1000]
        return outcome
    finally:
        outcome.latency_ms = round((time.perf_counter() - started) * 1000, 1)


def _charge(outcome: CallOutcome, gate: BudgetGate, config: LlmJudgeConfig, tokens_before: int,
            new_calls: int) -> None:
    """Recompute the cost from the running token totals and spend this round's tokens on the budget."""
    price = price_per_token(config.model, config.price_overrides)
    if price is None:
        note = f"no price known for model {config.model!r}: cost recorded as 0"
        if note not in outcome.notes:
            outcome.notes.append(note)
        previous_cost, outcome.cost = outcome.cost, 0.0
    else:
        previous_cost = outcome.cost
        outcome.cost = outcome.input_tokens * price[0] + outcome.output_tokens * price[1]
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
