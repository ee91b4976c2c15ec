"""Keyset ("cursor") pagination, newest first on (field, pk): no OFFSET, so page 1000 costs what page 1 costs.
The field is a datetime or a number (a model field or an annotation).

A cursor is an opaque URL-safe token naming the row a page starts after (older) or before (newer). A cursor that
does not decode is treated as none: the first page.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Q, QuerySet


@dataclass
class Page:
    items: list
    next_cursor: str | None  # older rows
    prev_cursor: str | None  # newer rows
    is_first: bool


def _encode(direction: str, value, pk) -> str:
    # The value's type travels with it: a datetime as ISO text ("d"), a number as itself ("n").
    kind = "d" if isinstance(value, datetime) else "n"
    raw = json.dumps([direction, value.isoformat() if isinstance(value, datetime) else value,
                      str(pk) if isinstance(pk, uuid.UUID) else pk, kind])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[str, datetime | float | None, object] | None:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        direction, value, pk, *rest = json.loads(raw)
        kind = rest[0] if rest else "d"
        if direction not in ("a", "b") or not isinstance(pk, (int, str)) or kind not in ("d", "n"):
            return None
        if value is None:
            return direction, None, pk
        if kind == "n":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            return direction, value, pk
        return direction, datetime.fromisoformat(value), pk
    except (ValueError, TypeError, json.JSONDecodeError):
        return None


def keyset_page(queryset: QuerySet, *, field: str, cursor: str | None, limit: int) -> Page:
    """One page of `queryset` ordered by `field` descending (nulls last), then pk descending."""
    decoded = _decode(cursor) if cursor else None
    direction, value, pk = decoded if decoded else ("a", None, None)
    if decoded is None:
        rows = queryset.order_by(F(field).desc(nulls_last=True), "-pk")
    elif direction == "a":  # older than the cursor row
        if value is None:
            condition = Q(**{f"{field}__isnull": True, "pk__lt": pk})
        else:
            condition = (Q(**{f"{field}__lt": value}) | Q(**{field: value, "pk__lt": pk})
                         | Q(**{f"{field}__isnull": True}))
        rows = queryset.filter(condition).order_by(F(field).desc(nulls_last=True), "-pk")
    else:  # newer than the cursor row: walk up, then flip
        if value is None:
            condition = Q(**{f"{field}__isnull": False}) | Q(**{f"{field}__isnull": True, "pk__gt": pk})
        else:
            condition = Q(**{f"{field}__gt": value}) | Q(**{field: value, "pk__gt": pk})
        rows = queryset.filter(condition).order_by(F(field).asc(nulls_first=True), "pk")
    items = list(rows[: limit + 1])
    more = len(items) > limit
    items = items[:limit]
    if decoded is not None and direction == "b":
        items.reverse()
        has_older, has_newer = True, more
    else:
        has_older, has_newer = more, decoded is not None
    next_cursor = _encode("a", getattr(items[-1], field), items[-1].pk) if items and has_older else None
    prev_cursor = _encode("b", getattr(items[0], field), items[0].pk) if items and has_newer else None
    return Page(items=items, next_cursor=next_cursor, prev_cursor=prev_cursor,
                is_first=decoded is None or not has_newer)
