"""The one place that decides between Postgres-only SQL and the portable path.

Clear runs on Postgres (psycopg 3) and on the embedded default, SQLite. Code that has a faster Postgres form (COPY,
array parameters, loose index scans, materialised CTEs) writes the portable form as the function and names the
Postgres form with `postgres_fast_path`; nothing else in the code base looks at the database vendor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

P = ParamSpec("P")
R = TypeVar("R")


def on_postgres(connection: BaseDatabaseWrapper | None = None) -> bool:
    """True on Postgres through psycopg 3 (the fast paths bind arrays and use COPY as psycopg 3 does)."""
    connection = connection or connections["default"]
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


def postgres_fast_path(fast: Callable[P, R]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorates the portable implementation; on Postgres `fast`, which takes the same arguments, runs instead.
    Both must return the same thing for the same data (tests run each on its database)."""

    def decorate(portable: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(portable)
        def dispatch(*args: P.args, **kwargs: P.kwargs) -> R:
            return (fast if on_postgres() else portable)(*args, **kwargs)

        dispatch.portable = portable  # type: ignore[attr-defined]
        dispatch.postgres = fast  # type: ignore[attr-defined]
        return dispatch

    return decorate


def raw_cursor(connection):
    """psycopg's server-side-binding cursor on Django's connection (inside its current transaction)."""
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


def insert_select_parts(connection, model, given: dict[str, str]) -> tuple[str, str, dict]:
    """(column list, SELECT list, parameters) of an `INSERT INTO table (...) SELECT ...` of `model` rows: the
    columns in `given` take its SQL expressions, every other column its field default as a typed parameter (the
    model's defaults are Python-side, so a raw INSERT must spell them out)."""
    quote = connection.ops.quote_name
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    template = model()
    columns, values, params = [], [], {}
    for f in fields:
        columns.append(quote(f.column))
        if f.attname in given:
            values.append(given[f.attname])
        else:
            # The cast types the parameter (a None default would otherwise be text, whatever the column).
            values.append(f"%(d_{f.attname})s::{f.db_type(connection)}")
            params[f"d_{f.attname}"] = f.get_db_prep_save(getattr(template, f.attname), connection)
    return ", ".join(columns), ", ".join(values), params


M = TypeVar("M")


def row_by_id(rows: QuerySet[M], raw_id) -> M | None:
    """The row of `rows` whose primary key is `raw_id` as a URL or a request gave it, or None when there is none or
    the value is no id at all ("abc", None). (A key past bigint matches nothing: Django leaves it out of the SQL.)"""
    try:
        pk = int(raw_id)
    except (TypeError, ValueError):
        return None
    return rows.filter(pk=pk).first()
