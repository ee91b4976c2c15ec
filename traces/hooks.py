"""The one synchronous hook between the traces app and the apps built on it: trace deletion.

An app that keeps rows derived from traces, and must read them before the database cascade removes them (diagnosis:
which runs and insights counted the traces), registers a hook from its AppConfig.ready. Everything else another app
does after a deletion is a reaction to the `trace.deleted` fact (traces/facts.py), run by a worker.

A hook is called as `hook(project=..., trace_pks=[...], expired=...)` inside the deleting transaction, before the
delete (`expired`: retention removes them, not a user: what was measured on them stays as it was), and
returns None or an `after()` callable, which runs after the delete in the same transaction. `after()` may return a
JSON-able dict: the trace.deleted fact carries it under the hook's name, for that app's subscribers.
"""

from collections.abc import Callable

from django.utils.module_loading import import_string

TraceDeleteAfter = Callable[[], dict | None]
TraceDeleteHook = Callable[..., TraceDeleteAfter | None]

# name -> the hook, or its dotted path (imported at the first deletion, not while the apps load).
_hooks: dict[str, TraceDeleteHook | str] = {}


def trace_delete_hook_register(*, name: str, hook: TraceDeleteHook | str) -> None:
    _hooks[name] = hook


def trace_delete_hooks() -> list[tuple[str, TraceDeleteHook]]:
    for name, hook in list(_hooks.items()):
        if isinstance(hook, str):
            _hooks[name] = import_string(hook)
    return list(_hooks.items())  # type: ignore[arg-type]
