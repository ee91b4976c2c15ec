"""The limits every model call of Clear runs under (the CLEAR_JUDGE_* family), and the per-kind output sizes.

* CLEAR_JUDGE_TIMEOUT_SECONDS (60): seconds per request.
* CLEAR_JUDGE_MAX_RETRIES (3): retries of a request that failed transiently (connection, 5xx, 429, timeout).
* CLEAR_JUDGE_MAX_TOKENS (4096): the ceiling of `max_tokens`; a kind of call asks for its own size below it, and a
  reply cut by the limit is retried once with the limit doubled up to this ceiling.
* CLEAR_JUDGE_STRUCTURED_OUTPUT (auto): `on` sends the reply's JSON schema in `response_format`, `off` asks for a
  JSON object only, `auto` sends the schema where LiteLLM says the model supports it (a local OpenAI-compatible
  server usually needs `on`: LiteLLM does not know what it serves); `json_object_schema` sends the schema as
  `{"type": "json_object", "schema": …}`, the form llama-cpp-python's server takes (it answers `on`'s with a 500).

Read from Django settings when they are configured, else from the environment (the evolution backend may run
without Django). The evolution `litellm` backend's own config overrides these for its roles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_TOKENS = 4096
JSON_OBJECT_SCHEMA = "json_object_schema"
STRUCTURED_OUTPUT_MODES = ("auto", "on", "off", JSON_OBJECT_SCHEMA)
STRUCTURED_OUTPUT_HINT = "use auto, on, off or json_object_schema"

# What each kind of call asks for, sized from its reply schema (a reply this long is already verbose; the ceiling
# and the one doubling retry cover the rest). Kinds with a per-item reply add per item.
STEP_JUDGE_MAX_TOKENS = 1024  # up to 4 step verdicts; +STEP_JUDGE_TOKENS_PER_STEP for each further step
STEP_JUDGE_TOKENS_PER_STEP = 256
TRACE_JUDGE_MAX_TOKENS = 2048  # dimensions, issues, root cause and one entry per rubric
TRACE_JUDGE_TOKENS_PER_RUBRIC = 128
WINDOW_JUDGE_MAX_TOKENS = 1024  # running summary + issues
RUBRIC_GEN_MAX_TOKENS = 768  # 3-5 short rubrics
ATTRIBUTION_MAX_TOKENS = 512  # a step, an agent, a reason
NAMING_MAX_TOKENS = 512  # title, description, root cause, recommendation
EVOLUTION_ROLE_MAX_TOKENS = {"locator": 1024, "planner": 2048, "plan_reviewer": 1024, "implementer": 4096,
                             "code_reviewer": 1536}


@dataclass(frozen=True)
class LlmLimits:
    timeout: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    max_tokens: int = DEFAULT_MAX_TOKENS  # the ceiling
    structured_output: str = "auto"


def structured_output_mode(*, value: object, name: str = "CLEAR_JUDGE_STRUCTURED_OUTPUT") -> str:
    mode = str(value if value is not None else "auto").strip().lower() or "auto"
    if mode not in STRUCTURED_OUTPUT_MODES:
        raise ValueError(f"{name}={value!r}: {STRUCTURED_OUTPUT_HINT}")
    return mode


def _setting(name: str) -> object | None:
    try:
        from django.conf import settings

        if settings.configured:
            return getattr(settings, name, None)
    except ImportError:  # pragma: no cover - Clear always has Django; the backend may be used without settings
        pass
    return None


def _value(name: str, default: object, kind: type) -> object:
    value = _setting(name)
    if value is None:
        raw = os.environ.get(name, "").strip()
        value = raw if raw else default
    return kind(value)


def llm_limits_from_settings() -> LlmLimits:
    return LlmLimits(
        timeout=max(1.0, float(_value("CLEAR_JUDGE_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_S, float))),
        max_retries=max(0, int(_value("CLEAR_JUDGE_MAX_RETRIES", DEFAULT_MAX_RETRIES, int))),
        max_tokens=max(16, int(_value("CLEAR_JUDGE_MAX_TOKENS", DEFAULT_MAX_TOKENS, int))),
        structured_output=structured_output_mode(value=_value("CLEAR_JUDGE_STRUCTURED_OUTPUT", "auto", str)),
    )


def max_tokens_capped(*, wanted: int, ceiling: int | None) -> int:
    """`wanted`, never above the ceiling (and at least 1)."""
    return max(1, min(int(wanted), int(ceiling)) if ceiling else int(wanted))
