"""Where the litellm backend's model calls go when its config names no api_base: the endpoint litellm itself picks
for the model's provider, read from litellm's source (1.110: main.py and llms/*/). A model is checked by that URL,
so "ollama/llama3" alone is a call to http://localhost:11434 and is judged as one.

litellm reads the provider's variable first (OPENAI_BASE_URL, OLLAMA_API_BASE, …: the operator's, in the calling
process' environment), then its default. A provider missing from PROVIDER_ENDPOINTS is asked of litellm
(get_llm_provider returns the base of the OpenAI-compatible providers it knows); when neither says, the host cannot
be told and a job started through the API must name api_base.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# provider -> (the variables litellm reads, in its order; its default, or None: it has none and the call fails)
PROVIDER_ENDPOINTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), "https://api.openai.com/v1"),
    "text-completion-openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), "https://api.openai.com/v1"),
    "anthropic": (("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"), "https://api.anthropic.com"),
    "gemini": (("GEMINI_API_BASE",), "https://generativelanguage.googleapis.com"),
    "mistral": (("MISTRAL_API_BASE",), "https://api.mistral.ai/v1"),
    "openrouter": (("OPENROUTER_API_BASE",), "https://openrouter.ai/api/v1"),
    # Local model servers: their defaults are this machine.
    "ollama": (("OLLAMA_API_BASE",), "http://localhost:11434"),
    "ollama_chat": (("OLLAMA_API_BASE",), "http://localhost:11434"),
    "llamafile": (("LLAMAFILE_API_BASE",), "http://127.0.0.1:8080/v1"),
    "xinference": (("XINFERENCE_API_BASE",), "http://127.0.0.1:9997/v1"),
    "lemonade": (("LEMONADE_API_BASE",), "http://localhost:8000/api/v1"),
    "docker_model_runner": (("DOCKER_MODEL_RUNNER_API_BASE",), "http://localhost:22088/engines/llama.cpp"),
    "lm_studio": (("LM_STUDIO_API_BASE",), None),
    "hosted_vllm": (("HOSTED_VLLM_API_BASE",), None),
    "vllm": ((), None),  # runs the model in the calling process through the vllm package, or nowhere
}


@dataclass(frozen=True)
class ModelEndpoint:
    url: str | None  # None: no call can be made (no model), or its host cannot be told (see `unknown`)
    provider: str = ""
    variable: str = ""  # the operator's variable the URL came from, "" for litellm's default
    unknown: bool = False  # a provider whose endpoint Clear cannot tell


def _provider(model: str) -> tuple[str, str | None]:
    """The model's provider and the base litellm gives it, ("", None) when litellm cannot tell (then no call is
    made either: litellm asks the same function)."""
    prefix = model.split("/", 1)[0] if "/" in model else ""
    if prefix in PROVIDER_ENDPOINTS:
        return prefix, None
    from clear.llm import litellm_load

    try:
        _, provider, _, base = litellm_load().get_llm_provider(model)
    except Exception:  # noqa: BLE001 - litellm raises its own errors (BadRequestError, ValueError, …)
        return "", None
    return str(provider or ""), (base if isinstance(base, str) and base else None)


def model_default_endpoint(*, model) -> ModelEndpoint:
    """Where litellm sends `model` with no api_base, in this process' environment."""
    if not isinstance(model, str) or not model.strip():
        return ModelEndpoint(url=None)
    provider, base = _provider(model.strip())
    if not provider:
        return ModelEndpoint(url=None)
    if provider in PROVIDER_ENDPOINTS:
        variables, default = PROVIDER_ENDPOINTS[provider]
        for variable in variables:
            value = os.environ.get(variable, "").strip()
            if value:
                return ModelEndpoint(url=value, provider=provider, variable=variable)
        return ModelEndpoint(url=default, provider=provider, unknown=default is None)
    if base:
        return ModelEndpoint(url=base, provider=provider)
    return ModelEndpoint(url=None, provider=provider, unknown=True)
