"""Diagnosis settings, read from Django settings when set there, else from the environment, with local defaults.

- CLEAR_JUDGE_CONCURRENCY (4): trace tasks of one run queued or running at once.
- CLEAR_JUDGE_REDISPATCH_SECONDS (900): a trace task queued or running this long is sent again (a lost message).
- CLEAR_CONTINUOUS_DIAGNOSIS (true): the beat task judges traces as they complete.
- CLEAR_CONTINUOUS_JUDGES (""): judge names for continuous runs; empty = the defaults.
- CLEAR_CONTINUOUS_LOOKBACK_HOURS (24): continuous mode ignores traces last received before this.
- CLEAR_CONTINUOUS_BATCH (500): traces claimed per beat and project at most.
- CLEAR_CONTRASTIVE_FDR (0.1), CLEAR_CONTRASTIVE_MIN_SUPPORT (3), CLEAR_CONTRASTIVE_MAX_TRACES (5000): the
  contrastive judge's Benjamini–Hochberg level, failing traces a feature must be in, and the most traces with an
  outcome it compares (diagnosis/judges/contrastive.py).
- CLEAR_WRITE_TOOL_VERBS (book, cancel, create, delete, send, update, …): a tool whose name starts with one of these
  words changes state (a "write"); the contrastive judge tests writes as a class (diagnosis/judges/contrastive_tasks.py).
- CLEAR_TRACE_QUIET_SECONDS and CLEAR_JUDGE_MODEL live in clear/settings/base.py.
"""

from django.conf import settings

from clear.env import env_bool, env_float, env_int, env_list


def _get(name: str, default):
    return getattr(settings, name, default)


def judge_concurrency() -> int:
    return max(1, int(_get("CLEAR_JUDGE_CONCURRENCY", env_int("CLEAR_JUDGE_CONCURRENCY", 4))))


def redispatch_seconds() -> float:
    return float(_get("CLEAR_JUDGE_REDISPATCH_SECONDS", env_float("CLEAR_JUDGE_REDISPATCH_SECONDS", 900.0)))


def continuous_enabled() -> bool:
    return bool(_get("CLEAR_CONTINUOUS_DIAGNOSIS", env_bool("CLEAR_CONTINUOUS_DIAGNOSIS", True)))


def continuous_judges() -> list[str]:
    return list(_get("CLEAR_CONTINUOUS_JUDGES", env_list("CLEAR_CONTINUOUS_JUDGES", [])))


def continuous_lookback_hours() -> float:
    return float(_get("CLEAR_CONTINUOUS_LOOKBACK_HOURS", env_float("CLEAR_CONTINUOUS_LOOKBACK_HOURS", 24.0)))


def continuous_batch() -> int:
    return int(_get("CLEAR_CONTINUOUS_BATCH", env_int("CLEAR_CONTINUOUS_BATCH", 500)))


def trace_quiet_seconds() -> float:
    return float(_get("CLEAR_TRACE_QUIET_SECONDS", 30.0))


def judge_model() -> str:
    return _get("CLEAR_JUDGE_MODEL", "") or ""


def contrastive_fdr() -> float:
    return float(_get("CLEAR_CONTRASTIVE_FDR", env_float("CLEAR_CONTRASTIVE_FDR", 0.1)))


def contrastive_min_support() -> int:
    return max(1, int(_get("CLEAR_CONTRASTIVE_MIN_SUPPORT", env_int("CLEAR_CONTRASTIVE_MIN_SUPPORT", 3))))


# First words of tool names that change state. "transfer" is left out: agents mostly use it for hand-offs.
WRITE_TOOL_VERBS = ("add", "append", "approve", "assign", "book", "cancel", "charge", "close", "create", "delete",
                    "deploy", "drop", "edit", "grant", "insert", "issue", "merge", "modify", "move", "patch", "pay",
                    "post", "publish", "purchase", "put", "refund", "reject", "remove", "rename", "replace", "reserve",
                    "reset", "revoke", "save", "schedule", "send", "set", "submit", "update", "upsert", "write")


def write_tool_verbs() -> frozenset[str]:
    verbs = _get("CLEAR_WRITE_TOOL_VERBS", env_list("CLEAR_WRITE_TOOL_VERBS", list(WRITE_TOOL_VERBS)))
    return frozenset(verb.lower() for verb in verbs)


def contrastive_max_traces() -> int:
    return int(_get("CLEAR_CONTRASTIVE_MAX_TRACES", env_int("CLEAR_CONTRASTIVE_MAX_TRACES", 5000)))
