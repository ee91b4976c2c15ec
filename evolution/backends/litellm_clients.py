"""Closing the HTTP clients LiteLLM created for one role, once the role ends.

LiteLLM caches an SDK client (the OpenAI client and its httpx connection pool, or its own HTTPHandler) per
(api_base, key, timeout, ...) in `litellm.in_memory_llm_clients_cache`, for up to an hour, and closes an evicted one
only after a grace window. The patcher cuts each request's timeout to the role's remaining time, so every call has
its own cache key, hence its own client: each left a kept-alive connection in its pool, which the model server
later closed from its side (seen half-closed, CLOSE_WAIT, against llama-cpp-python's server). A role is a natural
end of use: the clients created while it ran are dropped from the cache and closed, which closes their sockets and
aborts a call the role abandoned on cancel or timeout (so the server stops generating for it).

Clients that existed before the role are someone else's (a judge in this process) and are left alone. Async clients
(closed by a coroutine) are left to LiteLLM's own closer: the patcher makes none.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator

from clear.llm import litellm_load

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def litellm_clients_closed() -> Iterator[None]:
    cache = litellm_load().in_memory_llm_clients_cache
    before = set(cache._cache_keys())
    try:
        yield
    finally:
        for key in cache._cache_keys():
            if key not in before:
                _drop_and_close(cache=cache, key=key)


def _drop_and_close(*, cache, key: str) -> None:
    client = cache.cache_dict.get(key)
    close = getattr(client, "close", None)
    if close is None or inspect.iscoroutinefunction(close):
        return
    cache.delete_cache(key)  # first, so that nothing picks the client up while it closes
    try:
        close()
    except Exception:  # noqa: BLE001 - a client that fails to close must not fail the role it served
        logger.warning("evolution: closing a LiteLLM client failed", exc_info=True)
