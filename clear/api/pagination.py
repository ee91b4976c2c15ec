"""Keyset ("cursor") pagination for every list under /api/v1/.

A page is `{"next": url | null, "previous": url | null, "results": [...]}`. The cursor is an opaque token holding
the sort key of the row it continues from, so pages stay stable while rows are inserted (offsets would shift) and
each page is one range query. The ordering must end in a unique, non-null field (the primary key);
nullable sort fields are annotated with Coalesce by the caller.
"""

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.utils.urls import remove_query_param, replace_query_param

from clear.errors import ClearError

CURSOR_PARAM = "cursor"
PAGE_SIZE_PARAM = "page_size"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

PAGINATION_PARAMETERS = [
    OpenApiParameter(CURSOR_PARAM, OpenApiTypes.STR, description="The `next` or `previous` link's cursor."),
    OpenApiParameter(PAGE_SIZE_PARAM, OpenApiTypes.INT,
                     description=f"Rows per page, 1..{MAX_PAGE_SIZE} (default {DEFAULT_PAGE_SIZE})."),
]


class InvalidCursorError(ClearError):
    code = "invalid_cursor"


@dataclass(frozen=True)
class Page:
    rows: list
    next_url: str | None
    previous_url: str | None


def _encode(values: list, reverse: bool) -> str:
    raw = json.dumps({"k": values, "r": int(reverse)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(token: str, size: int) -> tuple[list, bool]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        values, reverse = data["k"], bool(data["r"])
        if not isinstance(values, list) or len(values) != size:
            raise ValueError("wrong size")
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError, AttributeError):
        raise InvalidCursorError(
            "The cursor is not valid: pass the `next` or `previous` link of a page unchanged."
        ) from None
    return values, reverse


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value


def _after(ordering: list[tuple[str, bool]], values: list) -> Q:
    """Rows strictly after `values` in `ordering` ([(field, descending)]): (a > x) | (a = x & b > y) | …"""
    condition = Q()
    for index, (field, descending) in enumerate(ordering):
        step = Q(**{f"{field}__{'lt' if descending else 'gt'}": values[index]})
        for earlier in range(index):
            step &= Q(**{ordering[earlier][0]: values[earlier]})
        condition |= step
    return condition


def _typed(queryset: QuerySet, order: list[tuple[str, bool]], values: list) -> list:
    """The cursor's values as the fields' Python types; a tampered cursor is a 400, never a database error."""
    typed = []
    for (name, _), value in zip(order, values):
        annotation = queryset.query.annotations.get(name)
        field = annotation.output_field if annotation is not None else (
            queryset.model._meta.pk if name == "pk" else queryset.model._meta.get_field(name))
        try:
            value = field.to_python(value)
        except (ValidationError, TypeError, ValueError):
            value = None
        if value is None or (isinstance(value, int) and not -(2**63) < value < 2**63):
            raise InvalidCursorError("The cursor is not valid: pass the `next` or `previous` link of a page unchanged.")
        typed.append(value)
    return typed


def page_size_from(request: Request) -> int:
    raw = request.query_params.get(PAGE_SIZE_PARAM)
    if raw in (None, ""):
        return DEFAULT_PAGE_SIZE
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ClearError(f"page_size must be an integer from 1 to {MAX_PAGE_SIZE}.", code="invalid",
                         extra={"fields": {PAGE_SIZE_PARAM: ["out of range"]}})
    return size


def paginate(*, queryset: QuerySet, request: Request, ordering: tuple[str, ...]) -> Page:
    """One page of `queryset` in `ordering` ("-start_time", "-pk"), continuing from the request's cursor."""
    order = [(name.lstrip("-"), name.startswith("-")) for name in ordering]
    size = page_size_from(request)
    token = request.query_params.get(CURSOR_PARAM)
    values, reverse = _decode(token, len(order)) if token else (None, False)
    if values is not None:
        values = _typed(queryset, order, values)
    # Going back reads the rows before the cursor in the opposite order, then flips them.
    walk = [(field, descending != reverse) for field, descending in order]
    rows = queryset.order_by(*[f"{'-' if descending else ''}{field}" for field, descending in walk])
    if values is not None:
        rows = rows.filter(_after(walk, values))
    rows = list(rows[:size + 1])
    more = len(rows) > size
    rows = rows[:size]
    if reverse:
        rows.reverse()
    has_next, has_previous = (True, more) if reverse else (more, values is not None)

    url = request.build_absolute_uri()

    def link(row: Any, backwards: bool) -> str:
        key = [_plain(getattr(row, field)) for field, _ in order]
        return replace_query_param(url, CURSOR_PARAM, _encode(key, backwards))

    next_url = previous_url = None
    if rows:
        next_url = link(rows[-1], False) if has_next else None
        previous_url = link(rows[0], True) if has_previous else None
    elif values is not None:
        previous_url = remove_query_param(url, CURSOR_PARAM)  # nothing left past the cursor: back to the start
    return Page(rows=rows, next_url=next_url, previous_url=previous_url)


def paginated(serializer: type[serializers.Serializer], name: str) -> serializers.Serializer:
    """The OpenAPI shape of a page of `serializer` rows (for `extend_schema(responses=...)`)."""
    return inline_serializer(name=name, fields={
        "next": serializers.URLField(allow_null=True, help_text="The next page, null on the last one."),
        "previous": serializers.URLField(allow_null=True, help_text="The previous page, null on the first one."),
        "results": serializer(many=True),
    })


def page_body(*, page: Page, results: list) -> dict:
    return {"next": page.next_url, "previous": page.previous_url, "results": results}
