"""The span insert of the write path: binary COPY on Postgres, `bulk_create(ignore_conflicts=True)` elsewhere.

`spans_insert(rows)` stores unsaved `Span` instances and skips the ones already stored (same trace, same span id),
exactly like `Span.objects.bulk_create(rows, ignore_conflicts=True)`, which it replaces on the hot path:

* Postgres (psycopg 3): one `COPY traces_span (...) FROM STDIN (FORMAT BINARY)` inside a savepoint. The caller
  has already filtered out the spans it saw stored, so a conflict only happens when a concurrent request (a
  retried batch racing its first attempt) commits the same span first. COPY then fails with a unique violation;
  the savepoint is rolled back and the rows go through `bulk_create(ignore_conflicts=True)` (`INSERT ... ON
  CONFLICT DO NOTHING`), so the stored result is the same as before in every case. Rows are written sorted by
  (trace, span id) so that two transactions inserting overlapping spans wait on each other in the same order
  instead of deadlocking.
  Against Django's `bulk_create` this removes Django's per-field preparation, client-side quoting of the UNNEST
  arrays and the server's executor work per row; JSON is dumped once per value by psycopg's binary jsonb dumper
  (with `json.dumps`, as Django's JSONField does).
* Any other database (the embedded SQLite default): `bulk_create` as before.

Returns the list of rows handed to the database, as `bulk_create(ignore_conflicts=True)` does (it cannot tell
which of them were skipped).
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.utils import timezone

from traces.models import Span

logger = logging.getLogger(__name__)

BATCH_SIZE = 1000  # for the bulk_create path, as before

# (alias, database name) -> (COPY statement, column attnames, type oids)
_copy_plans: dict[tuple[str, str], tuple[str, tuple[str, ...], list[int]]] = {}


def _concrete_fields():
    return [f for f in Span._meta.concrete_fields if not f.primary_key]


def _copy_plan(connection) -> tuple[str, tuple[str, ...], list[int]]:
    key = (connection.alias, str(connection.settings_dict.get("NAME")))
    plan = _copy_plans.get(key)
    if plan is None:
        fields = _concrete_fields()
        table = Span._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped",
                [connection.ops.quote_name(table)],
            )
            oids = dict(cursor.fetchall())
        columns = [f.column for f in fields]
        statement = "COPY {} ({}) FROM STDIN (FORMAT BINARY)".format(
            connection.ops.quote_name(table), ", ".join(connection.ops.quote_name(c) for c in columns)
        )
        plan = (statement, tuple(f.attname for f in fields), [oids[c] for c in columns])
        _copy_plans[key] = plan
    return plan


def _copy(connection, rows: list[Span]) -> None:
    statement, attnames, oids = _copy_plan(connection)
    with connection.cursor() as cursor, connection.wrap_database_errors:
        # The Django cursor wrapper passes `copy` through to psycopg's cursor.
        with cursor.cursor.copy(statement) as copy:
            copy.set_types(oids)
            write_row = copy.write_row
            for span in rows:
                values = span.__dict__
                write_row([values[name] for name in attnames])


def _psycopg3() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


def spans_insert(rows: list[Span]) -> list[Span]:
    """Insert unsaved spans, leaving any (trace, span id) already stored as it is."""
    if not rows:
        return []
    alias = router.db_for_write(Span)
    connection = connections[alias]
    if connection.vendor != "postgresql" or not _psycopg3():
        return Span.objects.using(alias).bulk_create(rows, ignore_conflicts=True, batch_size=BATCH_SIZE)
    rows = sorted(rows, key=lambda span: (span.trace_id, span.span_id))
    # What the fields' pre_save does in bulk_create: auto_now_add stamps every row.
    now = timezone.now()
    for span in rows:
        span.received_at = now
    try:
        with transaction.atomic(using=alias):  # a savepoint inside the request's transaction
            _copy(connection, rows)
    except IntegrityError:
        # A concurrent request stored some of these spans after the caller looked: skip those, insert the rest.
        return Span.objects.using(alias).bulk_create(rows, ignore_conflicts=True, batch_size=BATCH_SIZE)
    except (DatabaseError, TypeError, ValueError, OverflowError) as exc:
        # A value COPY cannot take as it is (bulk_create's field preparation may convert it): the slow path
        # decides, and raises what it would have raised.
        logger.warning("spans_insert: COPY failed (%s: %s), using bulk_create", type(exc).__name__, exc)
        return Span.objects.using(alias).bulk_create(rows, ignore_conflicts=True, batch_size=BATCH_SIZE)
    for span in rows:
        span._state.adding = False
        span._state.db = alias
    return rows
