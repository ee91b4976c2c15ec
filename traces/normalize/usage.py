"""Token usage and cost of OTLP spans and Langfuse observations (used by mapping.build_span_record and langfuse.py).

Like content.py, the OTLP functions take the span's plain attribute dict `a` and `hit`, the subset of its keys that
any rule consults, so spans without a usage or cost key skip them with one set operation.
"""

from __future__ import annotations

from typing import Any

from .values import decode_jsonish, to_float, to_int

# A token count past 2^53 is no count a model produced (and past 2^63 it would not fit the bigint columns): read as
# absent, like any other value that is not a count.
MAX_TOKENS = 2**53


def _tokens(value) -> int | None:
    n = to_int(value)
    return n if n is not None and 0 <= n <= MAX_TOKENS else None

_IN_KEYS = ("input_tokens", "prompt_tokens", "promptTokens", "inputTokens", "input", "prompt")
_OUT_KEYS = ("output_tokens", "completion_tokens", "completionTokens", "outputTokens", "output", "completion")
_CACHED_KEYS = (
    "cached_tokens",
    "cache_read_input_tokens",
    "input_cached_tokens",
    "input_cache_read",
    "cache_read",
    "cachedContentTokens",
    "cachedInputTokens",
    "cached_input_tokens",  # Codex CLI (OpenAI Responses `input_tokens_details.cached_tokens`)
)
# Reasoning counts. Every source we know of reports them inside its output count (OpenAI `completion_tokens`,
# Responses `output_tokens`, Codex CLI, Genkit); `_counts_from_mapping` catches a vendor whose total says otherwise.
_REASONING_KEYS = (
    "reasoning_tokens",
    "reasoning_output_tokens",
    "reasoningTokens",
    "reasoningOutputTokens",
    "thoughtsTokens",  # Genkit (Gemini thinking), inside its outputTokens
)
_REASONING_DETAILS = (
    "completion_tokens_details",
    "output_tokens_details",
    "completionTokensDetails",
    "outputTokensDetails",
)
_TOTAL_KEYS = ("total_tokens", "totalTokens", "total")
# Langfuse bucket keys: its `input` / `output` exclude these, so they are added back (OTel-style inclusive counts)
_LF_INPUT_BUCKETS = ("input_cached_tokens", "input_cache_read", "input_cache_creation", "input_cache_write")
_LF_OUTPUT_BUCKETS = ("output_reasoning", "output_reasoning_tokens", "output_audio", "output_audio_tokens")


def usage_from_mapping(d: dict) -> tuple[int | None, int | None, int | None]:
    """(input, output, cached) from a usage dict in any of the usual shapes: Langfuse usage / usageDetails
    (`input`/`output` + buckets), OpenAI Chat (`prompt_tokens`, `prompt_tokens_details.cached_tokens`), OpenAI
    Responses (`input_tokens`, `input_tokens_details`), Vercel / Genkit camelCase. Keys naming the same count are
    never added together."""
    inp = out = cached = None
    for key in _IN_KEYS:
        if key in d:
            inp = _tokens(d[key])
            if inp is not None:
                if key == "input":
                    extra = [_tokens(d.get(b)) for b in _LF_INPUT_BUCKETS]
                    inp += sum(x for x in extra if x)
                break
    for key in _OUT_KEYS:
        if key in d:
            out = _tokens(d[key])
            if out is not None:
                if key == "output":
                    extra = [_tokens(d.get(b)) for b in _LF_OUTPUT_BUCKETS]
                    out += sum(x for x in extra if x)
                break
    for key in _CACHED_KEYS:
        if key in d:
            cached = _tokens(d[key])
            if cached is not None:
                break
    if cached is None:
        for key in ("prompt_tokens_details", "input_tokens_details", "promptTokensDetails", "inputTokensDetails"):
            details = d.get(key)
            if isinstance(details, dict):
                cached = _tokens(details.get("cached_tokens", details.get("cachedTokens")))
                if cached is not None:
                    break
    return inp, out, cached


def reasoning_from_mapping(d: dict) -> int | None:
    """Reasoning tokens of a usage dict: flat (`reasoning_tokens`, Codex `reasoning_output_tokens`, Langfuse
    `output_reasoning`) or OpenAI `completion_tokens_details` / `output_tokens_details.reasoning_tokens`."""
    for key in (*_REASONING_KEYS, "output_reasoning", "output_reasoning_tokens"):
        if key in d:
            n = _tokens(d[key])
            if n is not None:
                return n
    for key in _REASONING_DETAILS:
        details = d.get(key)
        if isinstance(details, dict):
            n = _tokens(details.get("reasoning_tokens", details.get("reasoningTokens")))
            if n is not None:
                return n
    return None


_GENERIC_IN = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
)
_GENERIC_OUT = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "llm.usage.completion_tokens",
)
_GENERIC_CACHED = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.prompt_tokens_details.cached_tokens",
    "gen_ai.usage.input_tokens_details.cached_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_AGG_IN = ("gen_ai.aggregated_usage.input_tokens", "gen_ai.aggregated_usage.prompt_tokens")
_AGG_OUT = ("gen_ai.aggregated_usage.output_tokens", "gen_ai.aggregated_usage.completion_tokens")
_AGG_CACHED = ("gen_ai.aggregated_usage.cache_read.input_tokens", "gen_ai.aggregated_usage.cache_read_input_tokens")
_GENERIC_REASONING = (
    "gen_ai.usage.reasoning_tokens",
    "gen_ai.usage.output_tokens_details.reasoning_tokens",
    "gen_ai.usage.completion_tokens_details.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
    "llm.usage.reasoning_tokens",
)
_AGG_REASONING = ("gen_ai.aggregated_usage.reasoning_tokens",)


def _first_int(a: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = a.get(key)
        if value is not None:
            n = _tokens(value)
            if n is not None:
                return n
    return None


_VERCEL_USAGE = ("ai.usage.inputTokens", "ai.usage.promptTokens", "ai.usage.outputTokens", "ai.usage.completionTokens")
USAGE_KEYS = frozenset(
    ("langfuse.observation.usage_details", "genkit:output", *_VERCEL_USAGE)
    + (*_GENERIC_IN, *_GENERIC_OUT, *_AGG_IN, *_AGG_OUT)
)
_NO_USAGE = (None, None, None, None, False)


def extract_usage(a: dict, hit: set) -> tuple[int | None, int | None, int | None, int | None, bool]:
    """(input, output, cached, reasoning, from_aggregated_keys). Counts as reported, except that output always
    includes reasoning; keys naming the same count (e.g. `gen_ai.usage.prompt_tokens` and
    `gen_ai.usage.input_tokens`) are never added together."""
    if not (hit & USAGE_KEYS):
        return vendor_usage(a)
    usage = _named_usage(a)
    return usage if usage[0] is not None or usage[1] is not None else vendor_usage(a)


def _named_usage(a: dict) -> tuple[int | None, int | None, int | None, int | None, bool]:
    v = a.get("langfuse.observation.usage_details")
    if v is not None:
        d = decode_jsonish(v)
        if isinstance(d, dict):
            inp, out, cached = usage_from_mapping(d)
            if inp is not None or out is not None:
                return inp, out, cached, reasoning_from_mapping(d), False
    if "genkit:output" in a and a.get("genkit:metadata:subtype") in ("model", "background-model"):
        d = decode_jsonish(a["genkit:output"])
        usage = d.get("usage") if isinstance(d, dict) else None
        if isinstance(usage, dict):
            inp, out, cached = usage_from_mapping(usage)
            if inp is not None or out is not None:
                return inp, out, cached, reasoning_from_mapping(usage), False
    inp = _first_int(a, ("ai.usage.inputTokens", "ai.usage.promptTokens"))
    out = _first_int(a, ("ai.usage.outputTokens", "ai.usage.completionTokens"))
    if inp is not None or out is not None:
        cached = _first_int(a, ("ai.usage.cachedInputTokens",))
        return inp, out, cached, _first_int(a, ("ai.usage.reasoningTokens",)), False
    inp = _first_int(a, _GENERIC_IN)
    out = _first_int(a, _GENERIC_OUT)
    if inp is not None or out is not None:
        return inp, out, _first_int(a, _GENERIC_CACHED), _first_int(a, _GENERIC_REASONING), False
    inp = _first_int(a, _AGG_IN)
    out = _first_int(a, _AGG_OUT)
    if inp is not None or out is not None:
        return inp, out, _first_int(a, _AGG_CACHED), _first_int(a, _AGG_REASONING), True
    return _NO_USAGE


def cost_from_mapping(d: Any) -> float | None:
    """Total cost from a cost-details dict: `total` if present, else the sum of the numeric entries."""
    if not isinstance(d, dict):
        return to_float(d)
    for key in ("total", "totalCost", "total_cost"):
        if key in d:
            total = to_float(d[key])
            if total is not None:
                return total
    values = [to_float(v) for v in d.values()]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


COST_KEYS = frozenset(
    (
        "langfuse.observation.cost_details",
        "gen_ai.usage.cost",
        "llm.cost.total",
        "llm.cost.prompt",
        "llm.cost.completion",
    )
)


def extract_cost(a: dict, hit: set) -> float | None:
    if not (hit & COST_KEYS):
        return None
    v = a.get("langfuse.observation.cost_details")
    if v is not None:
        cost = cost_from_mapping(decode_jsonish(v))
        if cost is not None:
            return cost
    for key in ("gen_ai.usage.cost", "llm.cost.total"):
        v = a.get(key)
        if v is not None:
            cost = to_float(v)
            if cost is not None:
                return cost
    p = to_float(a.get("llm.cost.prompt"))
    c = to_float(a.get("llm.cost.completion"))
    if p is not None or c is not None:
        return (p or 0.0) + (c or 0.0)
    return None




# Vendor carriers found by key shape rather than by name: a JSON object string under `mlflow.chat.tokenUsage` or any
# key ending in `.usage` / `.tokenUsage` / `.token_usage`, and flat `<prefix>.token_usage.<key>` /
# `<prefix>.tokenUsage.<key>` groups (Codex CLI `codex.turn.token_usage.input_tokens`). Read only when no named
# source above yields a count, so they never add to one.
_JSON_SUFFIXES = (".usage", ".tokenUsage", ".token_usage")
_FLAT_MARKERS = (".token_usage.", ".tokenUsage.")


def vendor_usage(a: dict) -> tuple[int | None, int | None, int | None, int | None, bool]:
    """Usage from the first vendor carrier that yields an input or output count (JSON strings before flat groups,
    each in attribute order); one carrier only, so a span sending both shapes is counted once."""
    groups: dict[str, dict] = {}
    for key, value in a.items():
        if "sage" not in key:  # cheap pre-filter: usage / Usage
            continue
        if key.endswith(_JSON_SUFFIXES) and isinstance(value, (str, dict)):
            d = decode_jsonish(value)
            if isinstance(d, dict):
                counts = _counts_from_mapping(d)
                if counts is not None:
                    return counts
            continue
        for marker in _FLAT_MARKERS:
            at = key.find(marker)
            if at > 0:
                groups.setdefault(key[: at + len(marker)], {})[key[at + len(marker) :]] = value
                break
    for flat in groups.values():
        counts = _counts_from_mapping(flat)
        if counts is not None:
            return counts
    return _NO_USAGE


def _counts_from_mapping(d: dict) -> tuple[int | None, int | None, int | None, int | None, bool] | None:
    inp, out, cached = usage_from_mapping(d)
    if inp is None and out is None:
        return None
    reasoning = reasoning_from_mapping(d)
    if reasoning and inp is not None and out is not None:
        total = _first_int(d, _TOTAL_KEYS)
        # A total that only adds up with reasoning on top says this source's output excludes it: add it so that
        # output_tokens always includes reasoning, as the OpenAI-style sources report it.
        if total is not None and total == inp + out + reasoning:
            out += reasoning
    return inp, out, cached, reasoning, False
