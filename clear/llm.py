"""Clear's one LLM client: the LiteLLM call, its retry policy, JSON replies with one repair, tokens and cost.

The LLM judges and attributions (diagnosis/judges/llm/client.py adds their cache and budget), the insight naming
(diagnosis/insights/naming.py) and the evolution patcher (evolution/backends/litellm_patcher.py) all call models
through here, so they retry, parse, repair and count alike. Nothing here knows a prompt or a verdict; a caller
may pass its reply schema for structured output.

* Retries: transient failures only (litellm.APIConnectionError, 5xx, 429 and timeouts; see clear/llm_errors.py),
  at most `max_retries`, waiting Retry-After (seconds or HTTP date; `retry-after-ms` too) when the provider sends
  it, else exponential backoff with jitter. Every other error is raised at once. LiteLLM's and the OpenAI SDK's own
  retries are switched off, so that this is the only policy (and its waits can be cut by a caller's deadline).
* Output cap: every request carries `max_tokens` (the caller's size for its kind of call, see clear/llm_limits.py).
  A reply cut by that limit (finish_reason "length") is asked again once with the limit doubled, up to the
  endpoint's ceiling; cut again, or already at the ceiling, it raises LlmCallError(cause="invalid_output:length"):
  the same request is never repeated unchanged.
* Structured output: with a schema from the caller and `structured_output` "on" (or "auto" and LiteLLM saying the
  model supports response schemas), `response_format` carries the JSON schema (not strict: the after-the-fact
  validation and the repair round stay for everyone); else it asks for a JSON object.
* JSON: one object per reply (a ```json fence is tolerated). A reply that is not one, or that the caller's check
  rejects, gets exactly one repair request carrying the problems.
* Tokens: as the provider reports them, else estimated (characters / 3.5) with a note. Cost: tokens x the price
  table (the caller's overrides, else `litellm.model_cost`, with and without the provider prefix); None when the
  model has no known price.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from types import ModuleType
from functools import lru_cache
from typing import Any

from clear.llm_errors import LENGTH, TRANSIENT, LlmCallError, llm_error_cause
from clear.llm_limits import DEFAULT_MAX_TOKENS, JSON_OBJECT_SCHEMA

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 120.0  # a provider asking for longer is treated as down for this call, not waited on
CHARS_PER_TOKEN = 3.5  # JSON-heavy text is denser than prose: conservative for budgets and windows
REPAIR_CONTENT_CHARS = 20_000  # the rejected reply sent back with the repair request
REPAIR_TEMPLATE = (
    "Your reply could not be used: {error}\n"
    "Reply again with only the corrected JSON object, in the format given in your instructions."
)
CUT_OFF_NOTE = " (the reply was cut off by the output token limit: be more concise)"
NO_USAGE_NOTE = "provider reported no token usage: estimated"
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

Check = Callable[[dict], list[str]]


def litellm_load() -> ModuleType:
    """LiteLLM, imported on first use (≈3 s) with the bundled price table instead of a download at import."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def sleep(seconds: float) -> None:  # module-level so tests can record the waits instead
    time.sleep(seconds)


def tokens_estimate(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return int(len(text) / CHARS_PER_TOKEN) + 1


@dataclass(frozen=True)
class LlmEndpoint:
    model: str  # any LiteLLM provider string, e.g. "openai/gpt-4o-mini", "ollama/llama3"
    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 60.0  # seconds per request
    max_retries: int = 3  # on transient failures only: connection, 5xx, 429, timeout
    temperature: float = 0.0
    max_tokens: int | None = DEFAULT_MAX_TOKENS  # this kind of call's size; None: the ceiling (or the default)
    max_tokens_ceiling: int | None = None  # how far a cut reply's retry may double it; None: max_tokens x 2
    structured_output: str = "auto"  # auto | on | off (see clear/llm_limits.py)

    def request_max_tokens(self) -> int:
        size = self.max_tokens or self.max_tokens_ceiling or DEFAULT_MAX_TOKENS
        return min(size, self.max_tokens_ceiling) if self.max_tokens_ceiling else size


@dataclass
class LlmUsage:
    """Running totals of one caller's requests; callers subclass it to carry their own outcome."""

    calls: int = 0  # HTTP requests made, retries included
    input_tokens: int = 0
    output_tokens: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LlmReply:
    content: str
    finish_reason: str
    model: str  # as the provider names it, else the endpoint's
    input_tokens: int
    output_tokens: int
    provider_cost: float | None  # LiteLLM's own cost of the response, when it computed one


@dataclass(frozen=True)
class JsonReply:
    value: dict | None  # the last reply's JSON object (None when it was not one)
    problems: list[str]  # why the last reply was rejected; empty when it was accepted
    content: str
    repaired: bool  # accepted on the repair round


def retry_after_seconds(*, error: BaseException) -> float | None:
    """The wait a 429 or timeout asks for (Retry-After in seconds or as an HTTP date, or retry-after-ms)."""
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


def backoff_seconds(*, attempt: int, error: BaseException) -> float:
    """What the provider asked for, else exponential backoff with jitter (spreads concurrent callers apart)."""
    wait = retry_after_seconds(error=error)
    if wait is None:
        wait = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
    return min(wait, RETRY_AFTER_MAX_S)


def price_per_token(*, model: str, overrides: Mapping[str, tuple[float, float]] | None = None,
                    ) -> tuple[float, float] | None:
    """(usd per input token, per output token), or None when neither the overrides nor LiteLLM know the model."""
    if overrides and model in overrides:
        price_in, price_out = overrides[model]
        return float(price_in), float(price_out)
    table = litellm_load().model_cost
    for name in (model, model.split("/", 1)[-1]):
        entry = table.get(name)
        if entry and "input_cost_per_token" in entry:
            return float(entry.get("input_cost_per_token") or 0.0), float(entry.get("output_cost_per_token") or 0.0)
    return None


def cost_usd(*, model: str, input_tokens: int, output_tokens: int,
             overrides: Mapping[str, tuple[float, float]] | None = None) -> float | None:
    price = price_per_token(model=model, overrides=overrides)
    if price is None:
        return None
    return input_tokens * price[0] + output_tokens * price[1]


def json_object_parse(*, content: str) -> tuple[dict | None, str]:
    """(the reply's JSON object, "") or (None, why it is not one: a sentence the repair request can carry)."""
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


_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@lru_cache(maxsize=64)
def _model_supports_schema(model: str) -> bool:
    litellm = litellm_load()
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        return bool(litellm.supports_response_schema(model=name, custom_llm_provider=provider))
    except Exception:  # noqa: BLE001 - a model LiteLLM does not know gets the JSON-object mode
        return False


def structured_output_on(*, endpoint: LlmEndpoint) -> bool:
    """Whether this endpoint's requests carry the reply's JSON schema (the setting, else LiteLLM's word)."""
    mode = (endpoint.structured_output or "auto").lower()
    if mode in ("on", "off", JSON_OBJECT_SCHEMA):
        return mode != "off"
    return _model_supports_schema(endpoint.model)


# Bounds given to a schema's open strings and arrays for constrained decoding only (validation keeps the caller's
# schema): a grammar from an unbounded schema lets a small model write inside one string, or add item after item,
# until max_tokens (SmolLM2-135M under llama.cpp's grammar: every reply cut at the limit).
DECODING_STRING_CHARS = 200
DECODING_ID_CHARS = 64  # ids, span ids, node names
DECODING_ITEMS = 4  # an array at the top of the reply (issues; the step judge sets its batch size)
DECODING_NESTED_ITEMS = 2  # an array inside an array's items (a step's issues)
DECODING_DEEP_ITEMS = 1  # deeper still (the evidence of a step's issue)
DECODING_CHARS_PER_TOKEN = 2.5  # worst case of a bounded reply: JSON punctuation and rambling text tokenise densely
_ID_KEYS = {"id", "span_id", "node", "trace_id"}


def schema_bounded(*, schema: Any, key: str = "", arrays: int = 0) -> Any:
    """A copy of `schema` in which every string without an enum or maxLength gets a maxLength and every array
    without maxItems a maxItems, so that a grammar built from it always closes."""
    if not isinstance(schema, dict):
        return schema
    if isinstance(schema.get("type"), list) and len(schema["type"]) > 1:
        # One alternative per type: grammar converters turn a type list into bare types and lose an object's
        # properties and required keys (llama-cpp-python's did: a root_cause came back as {}).
        return {"anyOf": [schema_bounded(schema={"type": "null"} if kind == "null" else {**schema, "type": kind},
                                         key=key, arrays=arrays) for kind in schema["type"]]}
    bounded = dict(schema)
    kinds = bounded.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "string" in kinds and "enum" not in bounded and "maxLength" not in bounded:
        bounded["maxLength"] = DECODING_ID_CHARS if key in _ID_KEYS else DECODING_STRING_CHARS
    low, high = bounded.get("minimum"), bounded.get("maximum")
    if kinds == ["number"] and "enum" not in bounded and isinstance(low, (int, float)) and isinstance(high, (int, float)):
        # Grammars ignore a number's minimum and maximum (llama.cpp's do): a score in [0, 1] came back as 5. Eleven
        # evenly spaced values keep the reply inside the range, a judge's score needs no finer grain.
        bounded["enum"] = [round(low + i * (high - low) / 10, 6) for i in range(11)]
    if "array" in kinds:
        bounded.setdefault("maxItems", (DECODING_ITEMS, DECODING_NESTED_ITEMS)[arrays] if arrays < 2
                           else DECODING_DEEP_ITEMS)
        if isinstance(bounded.get("items"), dict):
            bounded["items"] = schema_bounded(schema=bounded["items"], arrays=arrays + 1)
        if isinstance(bounded.get("prefixItems"), list):
            bounded["prefixItems"] = [schema_bounded(schema=item, arrays=arrays + 1) for item in bounded["prefixItems"]]
    if isinstance(bounded.get("properties"), dict):
        bounded["properties"] = {name: schema_bounded(schema=sub, key=name, arrays=arrays)
                                 for name, sub in bounded["properties"].items()}
    return bounded


def schema_max_tokens(*, schema: Any) -> int:
    """The output tokens a reply that fills every bound of a bounded schema could take: what max_tokens must allow
    so that a constrained reply is never cut."""
    return int(_max_chars(schema) / DECODING_CHARS_PER_TOKEN) + 16


def _max_chars(schema: Any) -> int:
    if not isinstance(schema, dict):
        return 8
    if "enum" in schema:
        return max((len(json.dumps(value)) for value in schema["enum"]), default=4)
    if "const" in schema:
        return len(json.dumps(schema["const"]))
    if "anyOf" in schema:
        return max((_max_chars(sub) for sub in schema["anyOf"]), default=24)
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    sizes = []
    for kind in kinds:
        if kind == "string":
            sizes.append(schema.get("maxLength", DECODING_STRING_CHARS) + 2)
        elif kind == "array" and isinstance(schema.get("prefixItems"), list):
            sizes.append(sum(_max_chars(item) + 2 for item in schema["prefixItems"]) + 2)
        elif kind == "array":
            sizes.append(schema.get("maxItems", DECODING_ITEMS) * (_max_chars(schema.get("items")) + 2) + 2)
        elif kind == "object":
            sizes.append(sum(len(name) + 4 + _max_chars(sub) for name, sub in (schema.get("properties") or {}).items())
                         + 2)
        else:  # number, integer, boolean, null
            sizes.append(24)
    return max(sizes, default=24)


def response_format_for(*, endpoint: LlmEndpoint, schema: dict | None, schema_name: str = "reply") -> dict:
    if schema is None or not structured_output_on(endpoint=endpoint):
        return {"type": "json_object"}
    schema = schema_bounded(schema=schema)
    if (endpoint.structured_output or "").lower() == JSON_OBJECT_SCHEMA:
        # llama-cpp-python's server (and Anyscale-style APIs) constrain decoding to a schema given this way and
        # answer the OpenAI json_schema form with a 500.
        return {"type": "json_object", "schema": schema}
    # Not strict: strict mode rejects schemas with optional keys or open objects, which the judges' schemas have.
    name = _SCHEMA_NAME.sub("_", schema_name).strip("_")[:64] or "reply"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}


def llm_complete(*, endpoint: LlmEndpoint, messages: list[dict], usage: LlmUsage, schema: dict | None = None,
                 schema_name: str = "reply", remaining: Callable[[], float] | None = None,
                 runner: Callable[[Callable[[], Any], float], Any] | None = None) -> LlmReply:
    """One JSON completion bounded by `max_tokens`, retrying transient failures; raises the provider's error
    otherwise or once the retries are spent (clear.llm_errors.llm_error_cause names its cause), and LlmCallError
    for a reply still cut by the length limit. Tokens and requests are added to `usage`.

    `schema` (with `schema_name`) is the reply's JSON schema, sent in `response_format` where structured output is
    on. `remaining()` gives the seconds left before the caller's deadline (and may raise to stop): each request's
    timeout and each wait are cut to it. `runner(call, timeout)` runs the request (e.g. in a thread the caller can
    abandon when cancelled); by default it runs here."""
    litellm = litellm_load()
    response_format = response_format_for(endpoint=endpoint, schema=schema, schema_name=schema_name)
    max_tokens = endpoint.request_max_tokens()
    ceiling = endpoint.max_tokens_ceiling or max_tokens * 2
    if response_format["type"] != "json_object" or "schema" in response_format:
        # Constrained decoding: room for the longest reply the bounded schema allows (up to the ceiling).
        max_tokens = max(max_tokens, min(schema_max_tokens(schema=schema_bounded(schema=schema)), ceiling))
    failures = 0
    widened = False
    while True:
        timeout = endpoint.timeout if remaining is None else min(endpoint.timeout, remaining())

        def call(timeout: float = timeout, max_tokens: int = max_tokens) -> Any:
            return litellm.completion(
                model=endpoint.model, messages=messages, api_base=endpoint.api_base, api_key=endpoint.api_key,
                response_format=response_format, temperature=endpoint.temperature, timeout=timeout,
                max_tokens=max_tokens, num_retries=0, max_retries=0, drop_params=True,
            )

        usage.calls += 1
        try:
            response = runner(call, timeout) if runner is not None else call()
        except Exception as error:
            if llm_error_cause(error=error, litellm=litellm) not in TRANSIENT or failures >= endpoint.max_retries:
                raise
            failures += 1
            wait = backoff_seconds(attempt=failures, error=error)
            sleep(wait if remaining is None else min(wait, remaining()))
            continue
        reply = _reply(response=response, endpoint=endpoint, messages=messages, usage=usage)
        if reply.finish_reason != "length":
            return reply
        # Cut by the output limit: the same request would be cut the same way, so only a larger limit is worth one.
        larger = min(max_tokens * 2, ceiling)
        if widened or larger <= max_tokens:
            raise LlmCallError(cause=LENGTH, message=f"the reply was cut by the output token limit ({max_tokens} "
                               f"tokens{', the ceiling' if larger <= max_tokens else ''})")
        usage.notes.append(f"reply cut at {max_tokens} output tokens: asked again with {larger}")
        max_tokens, widened = larger, True


def _reply(*, response: Any, endpoint: LlmEndpoint, messages: list[dict], usage: LlmUsage) -> LlmReply:
    tokens = getattr(response, "usage", None)
    prompt = getattr(tokens, "prompt_tokens", None)
    completion = getattr(tokens, "completion_tokens", None)
    choice = response.choices[0]
    content = choice.message.content or ""
    if prompt is None or completion is None:
        usage.notes.append(NO_USAGE_NOTE)
        prompt, completion = tokens_estimate(messages), tokens_estimate(content)
    usage.input_tokens += int(prompt)
    usage.output_tokens += int(completion)
    provider_cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    return LlmReply(content=content, finish_reason=getattr(choice, "finish_reason", "") or "",
                    model=getattr(response, "model", None) or endpoint.model, input_tokens=int(prompt),
                    output_tokens=int(completion),
                    provider_cost=None if provider_cost is None else float(provider_cost))


def llm_json_complete(*, messages: list[dict], complete: Callable[[list[dict]], LlmReply], check: Check | None = None,
                      repair_chars: int = 1500, on_reply: Callable[[int, str, list[str]], None] | None = None,
                      ) -> JsonReply:
    """Ask for one JSON object; a reply that is not one, or that `check` finds problems with, gets exactly one
    repair request carrying those problems (at most `repair_chars` of them).

    `complete(conversation)` makes the request (usually `llm_complete` with the caller's endpoint, budget or
    deadline); its exceptions propagate. `on_reply(round, content, problems)` sees every reply, e.g. for a log."""
    conversation = list(messages)
    for round_no in (1, 2):
        reply = complete(conversation)
        value, parse_error = json_object_parse(content=reply.content)
        if value is None:
            problems = [parse_error + (CUT_OFF_NOTE if reply.finish_reason == "length" else "")]
        else:
            problems = check(value) if check is not None else []
        if on_reply is not None:
            on_reply(round_no, reply.content, problems)
        if not problems:
            return JsonReply(value=value, problems=[], content=reply.content, repaired=round_no == 2)
        if round_no == 1:
            error = "; ".join(problems)[:repair_chars]
            conversation += [{"role": "assistant", "content": reply.content[:REPAIR_CONTENT_CHARS]},
                             {"role": "user", "content": REPAIR_TEMPLATE.format(error=error)}]
    return JsonReply(value=value, problems=problems, content=reply.content, repaired=False)
