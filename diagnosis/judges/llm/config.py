"""Configuration of the LLM judges (plain data; no Django needed unless `from_settings` is used)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from clear.llm import LlmEndpoint
from clear.llm_limits import DEFAULT_MAX_TOKENS, llm_limits_from_settings, max_tokens_capped


@runtime_checkable
class Budget(Protocol):
    """A per-run token / cost budget supplied by the caller (shared between threads: make it thread-safe)."""

    def allow(self, tokens_estimate: int) -> bool: ...

    def spend(self, tokens: int, cost: float) -> None: ...


@dataclass
class LlmJudgeConfig:
    model: str  # any LiteLLM provider string, e.g. "openai/gpt-4o-mini", "ollama/llama3"
    api_base: str | None = None
    api_key: str | None = None
    step_judges: bool = True  # judge LLM, TOOL and AGENT spans
    trace_judge: bool = True
    generated_rubrics: bool = False  # 3–5 rubrics derived from the trace's goal, then checked
    max_context_tokens: int = 12000  # window size (prompt tokens per call) for long traces
    timeout: float = 60.0
    max_retries: int = 3  # connection errors, 5xx, 429 and timeouts, with backoff (honour Retry-After)
    max_tokens: int = DEFAULT_MAX_TOKENS  # ceiling of every call's max_tokens (each kind asks for its own size)
    structured_output: str = "auto"  # auto | on | off | json_object_schema (clear/llm_limits.py)
    price_overrides: dict[str, tuple[float, float]] | None = None  # model -> (usd per input token, per output)
    cache_get: Callable[[str], dict | None] | None = None  # content-hash cache supplied by the caller
    cache_put: Callable[[str, dict], None] | None = None
    budget: Budget | None = None  # .allow(tokens_estimate) -> bool and .spend(tokens, cost)

    def endpoint(self, *, max_tokens: int | None = None) -> LlmEndpoint:
        """The endpoint of one kind of call: `max_tokens` is its size, capped by this config's ceiling."""
        size = max_tokens_capped(wanted=max_tokens or self.max_tokens, ceiling=self.max_tokens)
        return LlmEndpoint(model=self.model, api_base=self.api_base, api_key=self.api_key, timeout=self.timeout,
                           max_retries=self.max_retries, max_tokens=size, max_tokens_ceiling=self.max_tokens,
                           structured_output=self.structured_output)

    @classmethod
    def from_settings(cls, **overrides) -> "LlmJudgeConfig":
        """CLEAR_JUDGE_MODEL / _API_BASE / _API_KEY / _TIMEOUT_SECONDS / _MAX_RETRIES / _MAX_TOKENS /
        _STRUCTURED_OUTPUT from Django settings, plus overrides."""
        from django.conf import settings

        limits = llm_limits_from_settings()
        values = {
            "model": getattr(settings, "CLEAR_JUDGE_MODEL", None) or "",
            "api_base": getattr(settings, "CLEAR_JUDGE_API_BASE", None) or None,
            "api_key": getattr(settings, "CLEAR_JUDGE_API_KEY", None) or None,
            "timeout": limits.timeout,
            "max_retries": limits.max_retries,
            "max_tokens": limits.max_tokens,
            "structured_output": limits.structured_output,
        }
        values.update(overrides)
        return cls(**values)
