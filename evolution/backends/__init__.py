"""Coding-agent backends: the interface, the registry, and the scripted backend used by tests and demos."""

import importlib
from collections.abc import Mapping
from typing import Any

from evolution.backends.base import Access, CodingBackend, Preflight, Role, RoleRequest, RoleResult
from evolution.errors import BackendCrashed, BackendError

# Imported on first use: a backend's optional dependencies must not be needed to run another one.
BACKENDS: dict[str, str] = {
    "scripted": "evolution.backends.scripted:ScriptedBackend",
    "litellm": "evolution.backends.litellm_patcher:LiteLLMPatcherBackend",
    "external": "evolution.backends.external:ExternalCommandBackend",
}


def backend_class_get(*, name: str) -> type[CodingBackend]:
    target = BACKENDS.get(name)
    if target is None:
        raise BackendError(f"Unknown coding backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}.",
                           extra={"backend": name})
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(f"Coding backend {name!r} cannot be loaded: {exc}", extra={"backend": name}) from exc
    return getattr(module, class_name)


def backend_get(*, name: str, config: Mapping[str, Any]) -> CodingBackend:
    """A configured backend; an unknown name or a bad config raises BackendError saying what to fix."""
    if not isinstance(config, Mapping):
        raise BackendError(f"The config of coding backend {name!r} must be an object, got {type(config).__name__}.")
    return backend_class_get(name=name)(config=config)


__all__ = [
    "BACKENDS", "Access", "BackendCrashed", "BackendError", "CodingBackend", "Preflight", "Role", "RoleRequest",
    "RoleResult", "backend_class_get", "backend_get",
]
