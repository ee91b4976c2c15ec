"""Span start and end times as sent: checked, never rewritten in silence.

A start that means nothing (negative, not a number, beyond what a 64-bit signed nanosecond clock can hold) is set
to a valid end; without one the span is rejected: there is no time to put it at. An end that means nothing, or that
comes before the start, is set to the start. Every repair is recorded on the span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .values import parse_iso_datetime, to_int

MAX_NS = 2**63 - 1  # the int64 nanosecond clock of every OTel SDK ends in 2262


@dataclass(slots=True)
class SpanTimes:
    start_ns: int
    end_ns: int
    rejected: str | None = None  # why the span cannot be kept
    repairs: list[dict] = field(default_factory=list)


def _parse(value: Any) -> tuple[int, str | None]:
    """(nanoseconds, None), (0, None) when absent, or (0, why it means nothing)."""
    if value is None or value == "" or value == 0:
        return 0, None
    if isinstance(value, bool):
        return 0, "not a number"
    if isinstance(value, str):
        s = value.strip()
        try:
            n = int(s)
        except ValueError:
            dt = parse_iso_datetime(s)  # hand-rolled exporters sometimes send ISO strings
            if dt is None:
                return 0, "not a number"
            n = int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000
    else:
        n = to_int(value)
        if n is None:
            return 0, "not a number"
    if n < 0:
        return 0, "negative"
    if n > MAX_NS:
        return 0, "out of range"
    return n, None


def check_times(*, start: Any, end: Any, start_name: str = "startTimeUnixNano",
                end_name: str = "endTimeUnixNano") -> SpanTimes:
    start_ns, start_why = _parse(start)
    end_ns, end_why = _parse(end)
    if start_why is not None:
        if end_why is not None or not end_ns:
            return SpanTimes(0, 0, rejected=f"{start_name} {str(start)[:40]!r} is {start_why}")
        return SpanTimes(end_ns, end_ns, repairs=[_repair("start_time", f"start time {start_why}, set to the end",
                                                          start)])
    repairs = []
    if end_why is not None:
        repairs.append(_repair("end_time", f"end time {end_why}, set to the start", end))
        end_ns = start_ns
    elif end_ns and start_ns and end_ns < start_ns:
        repairs.append(_repair("end_time", "end before start, set to the start", end))
        end_ns = start_ns
    return SpanTimes(start_ns, end_ns, repairs=repairs)


def _repair(field_name: str, reason: str, original: Any) -> dict:
    return {"field": field_name, "reason": reason, "original_length": None, "original": str(original)[:40]}
