"""The span table's daily partitions on Postgres (SQLite keeps one plain table; every function here is a no-op there).

`traces_span` is range-partitioned on `trace_day`, the trace's first-received UTC day (Trace.first_received_day,
copied to each span), so a trace never splits across partitions and retention removes whole traces by dropping
whole days. Partitions are named `traces_span_pYYYYMMDD` and hold one day; `traces_span_default` catches a day that
has no partition yet (a trace first received long ago or far ahead, or a day beat has not reached).

    span_partitions_ensure(today=..., days_ahead=7)   # beat: create the coming days, moving rows out of the default
    span_partitions_drop(days=[day, ...])             # retention: drop whole days, returns what it dropped
    span_table_partition(batch_size=50_000)           # migration 0008: convert a plain table, batched, resumable

The primary key is (id, trace_day) and the unique key (trace, span id, trace_day, project): a partitioned table's
unique keys must hold the partition key, and a distributed one (Citus, by project) must hold project. Ids still come
from one identity sequence, so `id` stays unique and the ORM keeps using it alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import date, timedelta

from django.db import connections, transaction

from clear.db import on_postgres
from traces.models import Span, utc_today

logger = logging.getLogger(__name__)

TABLE = Span._meta.db_table
DEFAULT = f"{TABLE}_default"
BUILDING = f"{TABLE}_partitioned"  # the new table while a conversion runs
UNIQUE = "span_unique_per_trace"


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def span_table_is_partitioned(*, alias: str = "default") -> bool:
    connection = connections[alias]
    if not on_postgres(connection):
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [TABLE])
        return cursor.fetchone() is not None


def span_partition_days(*, alias: str = "default") -> list[date]:
    """The days that have their own partition, oldest first."""
    connection = connections[alias]
    if not on_postgres(connection):
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)", [TABLE])
        names = [row[0] for row in cursor.fetchall()]
    prefix = f"{TABLE}_p"
    days = []
    for name in names:
        if name.startswith(prefix) and len(name) == len(prefix) + 8:
            days.append(date(int(name[-8:-4]), int(name[-4:-2]), int(name[-2:])))
    return sorted(days)


def span_default_rows(*, alias: str = "default") -> int | None:
    """Rows in the default partition (days that have no partition of their own); None where there is none."""
    if not span_table_is_partitioned(alias=alias):
        return None
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {DEFAULT}")
        return cursor.fetchone()[0]


def _create_partition(cursor, parent: str, day: date, default: str) -> bool:
    """Create the day's partition of `parent`; rows of that day already in the default partition are moved into it
    first (attaching a range that overlaps rows of the default partition fails). False when it exists."""
    name = partition_name(day) if parent == TABLE else f"{parent}_p{day:%Y%m%d}"
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    if cursor.fetchone()[0]:
        return False
    bounds = f"FROM ('{day.isoformat()}') TO ('{(day + timedelta(days=1)).isoformat()}')"
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {default} WHERE trace_day = %s)", [day])
    if not cursor.fetchone()[0]:
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {parent} FOR VALUES {bounds}")
        return True
    columns = _columns(cursor, parent)
    cursor.execute(f"CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS)")
    cursor.execute(f"WITH moved AS (DELETE FROM {default} WHERE trace_day = %s RETURNING {columns}) "
                   f"INSERT INTO {name} ({columns}) SELECT {columns} FROM moved", [day])
    cursor.execute(f"ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES {bounds}")
    return True


def _columns(cursor, table: str) -> str:
    cursor.execute("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                   "AND NOT attisdropped ORDER BY attnum", [table])
    return ", ".join(f'"{row[0]}"' for row in cursor.fetchall())


def span_partitions_ensure(*, today: date | None = None, days_ahead: int = 7, days: list[date] | None = None,
                           alias: str = "default") -> list[date]:
    """Create the partitions of today, yesterday and `days_ahead` coming days (and of `days`); returns the days
    created. Each day is its own transaction, so a long move out of the default partition locks one day at a time."""
    if not span_table_is_partitioned(alias=alias):
        return []
    today = today or utc_today()
    wanted = {today + timedelta(days=n) for n in range(-1, days_ahead + 1)} | set(days or [])
    created = []
    connection = connections[alias]
    for day in sorted(wanted):
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            if _create_partition(cursor, TABLE, day, DEFAULT):
                created.append(day)
    if created:
        logger.info("traces.partitions created=%s", ",".join(d.isoformat() for d in created))
    return created


def span_partitions_drop(*, days: list[date], alias: str = "default") -> list[date]:
    """Drop these days' partitions (those that exist): their spans go with them, with no row-by-row delete. Returns
    the days dropped. The caller has made sure every trace of those days is expired."""
    dropped = []
    connection = connections[alias]
    for day in sorted(set(days) & set(span_partition_days(alias=alias))):
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            # Deferred foreign-key checks of rows written earlier in this transaction would block the drop.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"DROP TABLE {partition_name(day)}")
        dropped.append(day)
    if dropped:
        logger.info("traces.partitions dropped=%s", ",".join(d.isoformat() for d in dropped))
    return dropped


# --- converting a plain span table (migration 0008) -------------------------------------------------------------

def _index_definitions(cursor) -> list[tuple[str, str]]:
    """(name, definition) of the plain table's indexes to build on the new table: all but the primary key and the
    old unique key, which the new table has in their partitioned form."""
    cursor.execute(
        "SELECT i.relname, pg_get_indexdef(x.indexrelid), x.indisunique FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = to_regclass(%s) AND NOT x.indisprimary",
        [TABLE])
    return [(name, definition) for name, definition, unique in cursor.fetchall() if not unique and name != UNIQUE]


def _foreign_keys(cursor, table: str) -> list[tuple[str, str]]:
    cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE conrelid = to_regclass(%s) AND contype = 'f'", [table])
    return cursor.fetchall()


def _build_table(cursor, days: list[date]) -> None:
    """The new partitioned table, empty, with every index, key and partition it ends up with (temporary names)."""
    cursor.execute(f"CREATE TABLE {BUILDING} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING IDENTITY) "
                   "PARTITION BY RANGE (trace_day)")
    cursor.execute(f"ALTER TABLE {BUILDING} ALTER COLUMN trace_day SET NOT NULL")
    cursor.execute(f"ALTER TABLE {BUILDING} ADD CONSTRAINT {TABLE}_pkey__p PRIMARY KEY (id, trace_day)")
    cursor.execute(f"ALTER TABLE {BUILDING} ADD CONSTRAINT {UNIQUE}__p "
                   "UNIQUE (trace_id, span_id, trace_day, project_id)")
    for name, definition in _index_definitions(cursor):
        on = definition.index(" ON ")
        using = definition.index(" USING ", on)
        prefix = "CREATE INDEX" if not definition.startswith("CREATE UNIQUE") else "CREATE UNIQUE INDEX"
        cursor.execute(f"{prefix} {name}__p ON {BUILDING}{definition[using:]}")
    for name, definition in _foreign_keys(cursor, TABLE):
        cursor.execute(f"ALTER TABLE {BUILDING} ADD CONSTRAINT {name}__p {definition}")
    cursor.execute(f"CREATE TABLE {BUILDING}_default PARTITION OF {BUILDING} DEFAULT")
    for day in days:
        _create_partition(cursor, BUILDING, day, f"{BUILDING}_default")


def _id_sequence_continue(cursor, next_id: int) -> None:
    """The swapped-in table's identity sequence takes the usual name and goes on after the copied ids."""
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    sequence = cursor.fetchone()[0]
    if sequence and sequence.split(".")[-1] != f"{TABLE}_id_seq":
        cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {TABLE}_id_seq")
    cursor.execute(f"ALTER TABLE {TABLE} ALTER COLUMN id RESTART WITH {next_id}")


def _swap(cursor, copy_rest: Callable[[], int]) -> int:
    """Copy what arrived since the last batch, drop the plain table and give the new one its names; one short
    transaction under an exclusive lock."""
    cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
    rest = copy_rest()
    cursor.execute(f"SELECT coalesce(max(id), 0) FROM {BUILDING}")
    next_id = cursor.fetchone()[0] + 1
    cursor.execute(f"DROP TABLE {TABLE}")
    cursor.execute(f"ALTER TABLE {BUILDING} RENAME TO {TABLE}")
    cursor.execute(f"ALTER TABLE {BUILDING}_default RENAME TO {DEFAULT}")
    cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                   "WHERE i.inhparent = to_regclass(%s)", [TABLE])
    for (name,) in cursor.fetchall():
        if name.startswith(f"{BUILDING}_p"):
            cursor.execute(f"ALTER TABLE {name} RENAME TO {TABLE}{name[len(BUILDING):]}")
    cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND conname LIKE '%%\\_\\_p'",
                   [TABLE])
    for (name,) in cursor.fetchall():
        cursor.execute(f"ALTER TABLE {TABLE} RENAME CONSTRAINT {name} TO {name[:-3]}")
    cursor.execute("SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                   "WHERE x.indrelid = to_regclass(%s) AND i.relname LIKE '%%\\_\\_p'", [TABLE])
    for (name,) in cursor.fetchall():
        cursor.execute(f"ALTER INDEX {name} RENAME TO {name[:-3]}")
    _id_sequence_continue(cursor, next_id)
    return rest


def span_table_partition(*, batch_size: int = 50_000, alias: str = "default",
                         on_batch: Callable[[int, int], None] | None = None) -> dict:
    """Convert a plain `traces_span` into the partitioned one without losing a row; returns {"rows", "seconds",
    "rows_per_second", "batches"}.

    Rows are copied `batch_size` at a time in id order, each batch its own transaction, with trace_day read from
    the trace row. An interrupted conversion resumes where it stopped (the new table's highest id is the cursor).
    The last step takes an exclusive lock only to copy the rows that arrived meanwhile and swap the names. Spans
    changed or deleted meanwhile are not followed: run it with ingestion stopped, as `manage.py migrate` is.
    `on_batch(copied, last_id)` is called after each committed batch."""
    connection = connections[alias]
    started = time.monotonic()
    if not on_postgres(connection) or span_table_is_partitioned(alias=alias):
        return {"rows": 0, "seconds": 0.0, "rows_per_second": None, "batches": 0}
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [BUILDING])
        if not cursor.fetchone()[0]:
            with transaction.atomic(using=alias):
                cursor.execute("SELECT DISTINCT first_received_day FROM traces_trace "
                               "WHERE first_received_day IS NOT NULL ORDER BY 1")
                days = {row[0] for row in cursor.fetchall()}
                today = utc_today()
                days |= {today + timedelta(days=n) for n in range(-1, 8)}
                _build_table(cursor, sorted(days))
        columns = _columns(cursor, TABLE)
        source = ", ".join("t.first_received_day" if c == '"trace_day"' else f"s.{c}" for c in columns.split(", "))

        def copy_after(after: int, limit: int | None) -> int:
            bounded = "AND s.id <= %s" if limit else ""
            params = [after] + ([after + limit] if limit else [])
            cursor.execute(f"INSERT INTO {BUILDING} ({columns}) SELECT {source} FROM {TABLE} s "
                           f"JOIN traces_trace t ON t.id = s.trace_id WHERE s.id > %s {bounded}", params)
            return cursor.rowcount

        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {BUILDING}")
        after = cursor.fetchone()[0]
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {TABLE}")
        last = cursor.fetchone()[0]
        copied = batches = 0
        while after < last:
            # Id ranges, not LIMIT: a range scan on the primary key, gaps and all; each batch commits.
            with transaction.atomic(using=alias):
                copied += copy_after(after, batch_size)
            batches += 1
            after = min(after + batch_size, last)
            if on_batch:
                on_batch(copied, after)
        with transaction.atomic(using=alias):
            copied += _swap(cursor, lambda: copy_after(after, None))
    seconds = time.monotonic() - started
    rate = round(copied / seconds) if seconds > 0 and copied else None
    logger.info("traces.partitions converted rows=%d seconds=%.1f rate=%s/s", copied, seconds, rate)
    return {"rows": copied, "seconds": round(seconds, 2), "rows_per_second": rate, "batches": batches}


def span_table_unpartition(*, alias: str = "default") -> None:
    """Back to one plain table (migration 0008 reversed): one transaction, for a development database."""
    connection = connections[alias]
    if not span_table_is_partitioned(alias=alias):
        return
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {TABLE}_plain (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING IDENTITY)")
        columns = _columns(cursor, TABLE)
        cursor.execute(f"INSERT INTO {TABLE}_plain ({columns}) SELECT {columns} FROM {TABLE}")
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {TABLE}")
        next_id = cursor.fetchone()[0]
        indexes = _index_definitions(cursor)
        keys = _foreign_keys(cursor, TABLE)
        cursor.execute(f"DROP TABLE {TABLE} CASCADE")
        cursor.execute(f"ALTER TABLE {TABLE}_plain RENAME TO {TABLE}")
        cursor.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)")
        cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {UNIQUE} UNIQUE (trace_id, span_id, trace_day, project_id)")
        for _, definition in indexes:
            cursor.execute(definition.replace(" ON ONLY ", " ON "))
        for name, definition in keys:
            cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {definition}")
        _id_sequence_continue(cursor, next_id)
