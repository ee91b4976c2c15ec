"""Spans partitioned by day on Postgres (traces/services/partitions.py).

Trace.first_received_day is filled in batches from first_received_at. On Postgres the span table is then converted:
a partitioned copy is filled in batches of CLEAR_SPAN_CONVERT_BATCH rows (default 50,000), each batch committed, so
an interrupted `migrate` resumes where it stopped, and the names are swapped in one short transaction at the end.
Run it with ingestion stopped (DEPLOYMENT.md). SQLite keeps a plain table and gets the column and the new unique key.
"""

import os

import django.db.models.deletion
from django.db import migrations, models

import traces.models

TRACE_BATCH = 20_000


def trace_days_fill(apps, schema_editor):
    connection = schema_editor.connection
    day = ("(first_received_at AT TIME ZONE 'UTC')::date" if connection.vendor == "postgresql"
           else "date(first_received_at)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM traces_trace")
        last = cursor.fetchone()[0]
        for start in range(0, last, TRACE_BATCH):
            cursor.execute(f"UPDATE traces_trace SET first_received_day = {day} "
                           "WHERE id > %s AND id <= %s AND first_received_day IS NULL", [start, start + TRACE_BATCH])


def trace_day_required(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE traces_trace ALTER COLUMN first_received_day SET NOT NULL")


def trace_day_optional(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE traces_trace ALTER COLUMN first_received_day DROP NOT NULL")


NEW_UNIQUE = models.UniqueConstraint(fields=["trace", "span_id", "trace_day", "project"], name="span_unique_per_trace")


def span_table_convert(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        from traces.services.partitions import span_table_partition

        report = span_table_partition(batch_size=int(os.environ.get("CLEAR_SPAN_CONVERT_BATCH") or 50_000),
                                      alias=connection.alias)
        if report["rows"]:
            print(f"\n  spans partitioned: {report['rows']} rows in {report['seconds']} s "
                  f"({report['rows_per_second']} rows/s, {report['batches']} batches)")
        return
    with connection.cursor() as cursor:  # SQLite: the column, then SQLITE_SPAN_SCHEMA below
        cursor.execute("UPDATE traces_span SET trace_day = (SELECT t.first_received_day FROM traces_trace t "
                       "WHERE t.id = traces_span.trace_id) WHERE trace_day IS NULL")


def span_table_revert(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        from traces.services.partitions import span_table_unpartition

        span_table_unpartition(alias=connection.alias)
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE traces_span DROP CONSTRAINT span_unique_per_trace")
            cursor.execute("ALTER TABLE traces_span ADD CONSTRAINT span_unique_per_trace UNIQUE (trace_id, span_id)")
            cursor.execute("ALTER TABLE traces_span ALTER COLUMN trace_day DROP NOT NULL")



class OnVendor(migrations.operations.base.Operation):
    """Schema operations applied on one database vendor only (their state changes are made by the caller's state
    operations). SQLite rebuilds a table from the model state it is given, so the span table's new unique key and
    NOT NULL must be applied as operations with their own states, not from inside RunPython."""

    reduces_to_sql = False

    def __init__(self, vendor: str, operations: list):
        self.vendor, self.operations = vendor, operations

    def deconstruct(self):
        return self.__class__.__name__, [self.vendor, self.operations], {}

    def state_forwards(self, app_label, state):
        for operation in self.operations:
            operation.state_forwards(app_label, state)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != self.vendor:
            return
        for operation in self.operations:
            state = from_state.clone()
            operation.state_forwards(app_label, state)
            operation.database_forwards(app_label, schema_editor, from_state, state)
            from_state = state

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != self.vendor:
            return
        states = [to_state]
        for operation in self.operations[:-1]:
            state = states[-1].clone()
            operation.state_forwards(app_label, state)
            states.append(state)
        for operation, before in zip(reversed(self.operations), reversed(states), strict=True):
            after = before.clone()
            operation.state_forwards(app_label, after)
            operation.database_backwards(app_label, schema_editor, after, before)

    def describe(self):
        return f"On {self.vendor} only: " + "; ".join(op.describe() for op in self.operations)


SPAN_SCHEMA = [
    migrations.RemoveConstraint("span", "span_unique_per_trace"),
    migrations.AlterField("span", "trace_day", models.DateField()),
    migrations.AddConstraint("span", NEW_UNIQUE),
]


class Migration(migrations.Migration):
    atomic = False  # the span conversion commits batch by batch

    dependencies = [("traces", "0007_expired_trace")]

    operations = [
        migrations.AddField("trace", "first_received_day", models.DateField(null=True)),
        migrations.RunPython(trace_days_fill, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            # SQLite would rebuild the table for NOT NULL, with migration 0002's Postgres-only indexes: the column
            # stays nullable there (every write path sets it).
            state_operations=[migrations.AlterField("trace", "first_received_day",
                                                    models.DateField(default=traces.models.utc_today))],
            database_operations=[migrations.RunPython(trace_day_required, trace_day_optional)],
        ),
        migrations.AddIndex("trace", models.Index(fields=["first_received_day"], name="trace_received_day")),
        migrations.RemoveIndex("trace", "trace_project_release"),
        migrations.AddIndex("trace", models.Index(fields=["project", "release", "first_received_at"],
                                                  name="trace_project_release_first")),
        migrations.AlterField("span", "project", models.ForeignKey(
            on_delete=django.db.models.deletion.CASCADE, related_name="+", to="projects.project", db_index=False)),
        migrations.AlterField("span", "trace", models.ForeignKey(
            on_delete=django.db.models.deletion.CASCADE, related_name="spans", to="traces.trace", db_index=False)),
        migrations.AddField("span", "trace_day", models.DateField(null=True)),
        migrations.SeparateDatabaseAndState(
            state_operations=SPAN_SCHEMA,
            # Postgres: the partitioned table has the new key and NOT NULL already.
            database_operations=[migrations.RunPython(span_table_convert, span_table_revert),
                                 OnVendor("sqlite", SPAN_SCHEMA)],
        ),
    ]
