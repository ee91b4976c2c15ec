"""Refusal check: a model-written field in which the model declines or speaks as the assistant ("I'm sorry, I can't
assist with that.") instead of judging the data.

Models refuse when a trace holds text their own policy flags, and small ones answer as the agent they read about. Such
a field is schema-valid and echoes nothing, but it says nothing about the run: shown as a critique it reads as a
finding. A field refuses when its normalised text (clear/text_echo.py `normalised`) starts with a first-person
apology or inability ("i m sorry", "sorry i", "i can t assist", "i cannot help", "i am unable", "as an ai"). Only the
start counts: a critique that quotes the agent's refusal ("The agent replied I'm sorry …") is a finding about it.

A reply with a refusal is asked for once more with the reason; one that still refuses is recorded as
`invalid_output:refusal` (clear/llm_errors.py REFUSAL), never a verdict or a statement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from clear.text_echo import normalised

REFUSAL_MARK = "is a refusal"  # in every refusal problem: invalid_output_cause reads it
_REFUSAL = re.compile(
    r"^(?:i m sorry|i am sorry|sorry i|apologies i|i apologi[sz]e"
    r"|i (?:can t|cannot|can not|won t|will not|am unable to|m unable to|am not able to|m not able to) "
    r"(?:assist|help|provide|comply|complete|do that|fulfil|fulfill|answer|evaluate|judge)"
    r"|as an ai\b)")


def is_refusal(text: str) -> bool:
    return bool(_REFUSAL.match(normalised(text)))


def refusal_problems(*, fields: Iterable[tuple[str, str]]) -> list[str]:
    """One problem per prose field (path, text) that refuses, naming the field and what to write instead."""
    return [f"{path}: {text[:80]!r} {REFUSAL_MARK}, not a judgement of the data; say what the spans show"
            for path, text in fields if is_refusal(text)]
