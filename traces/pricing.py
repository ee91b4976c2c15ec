"""Cost of a span that reports tokens and a model but no cost, from the price table `clear.llm.price_per_token`
reads (LiteLLM's bundled `model_prices_and_context_window_backup.json`, the file LITELLM_LOCAL_MODEL_COST_MAP
selects).

The file is read directly rather than through `clear.llm.litellm_load()`: importing LiteLLM takes seconds, too much
for the first OTLP request a web worker serves.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from pathlib import Path

import orjson

logger = logging.getLogger(__name__)

_TABLE_FILE = "model_prices_and_context_window_backup.json"


@functools.cache
def _price_table() -> dict:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / _TABLE_FILE
    try:
        table = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        logger.warning("no LiteLLM price table at %s: spans without a reported cost get none", path)
        return {}
    return table if isinstance(table, dict) else {}


def _prices(*, model: str) -> tuple[float, float, float] | None:
    """(usd per input token, per cache-read input token, per output token), or None for an unknown model."""
    table = _price_table()
    for name in (model, model.split("/", 1)[-1]):
        entry = table.get(name)
        if isinstance(entry, dict) and "input_cost_per_token" in entry:
            price_in = float(entry.get("input_cost_per_token") or 0.0)
            price_cached = entry.get("cache_read_input_token_cost")
            price_out = float(entry.get("output_cost_per_token") or 0.0)
            return price_in, float(price_cached) if price_cached is not None else price_in, price_out
    return None


def span_cost_estimate(*, model: str | None, input_tokens: int | None, output_tokens: int | None,
                       cached_tokens: int | None) -> float | None:
    """USD for one span's counts as MAPPING.md defines them: cached tokens are the cache-read part of input (billed at
    the cache-read price, the rest at the input price); reasoning tokens are inside output (billed once, at the
    output price)."""
    if not model or (not input_tokens and not output_tokens):
        return None
    prices = _prices(model=model)
    if prices is None:
        return None
    price_in, price_cached, price_out = prices
    inp = max(input_tokens or 0, 0)
    cached = min(max(cached_tokens or 0, 0), inp)
    return (inp - cached) * price_in + cached * price_cached + max(output_tokens or 0, 0) * price_out
