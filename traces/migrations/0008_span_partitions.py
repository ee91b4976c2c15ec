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


def _sqlite_fields(apps):
    Span = apps.get_model("traces", "Span")
    old = Span._meta.get_field("trace_day")
    new = models.DateField()
    new.set_attributes_from_name("trace_day")
    new.model = Span
    return Span, old, new


OLD_UNIQUE = models.UniqueConstraint(fields=["trace", "span_id"], name="span_unique_per_trace")
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
    with connection.cursor() as cursor:
        cursor.execute("UPDATE traces_span SET trace_day = (SELECT t.first_received_day FROM traces_trace t "
                       "WHERE t.id = traces_span.trace_id) WHERE trace_day IS NULL")
    Span, old, new = _sqlite_fields(apps)
    schema_editor.remove_constraint(Span, OLD_UNIQUE)
    schema_editor.alter_field(Span, old, new)
    Span = apps.get_model("traces", "Span")
    schema_editor.add_constraint(Span, NEW_UNIQUE)


def span_table_revert(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        from traces.services.partitions import span_table_unpartition

        span_table_unpartition(alias=connection.alias)
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE traces_span DROP CONSTRAINT span_unique_per_trace")
            cursor.execute("ALTER TABLE traces_span ADD CONSTRAINT span_unique_per_trace UNIQUE (trace_id, span_id)")
            cursor.execute("ALTER TABLE traces_span ALTER COLUMN trace_day DROP NOT NULL")
        return
    Span, old, new = _sqlite_fields(apps)
    schema_editor.remove_constraint(Span, NEW_UNIQUE)
    schema_editor.add_constraint(Span, OLD_UNIQUE)


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
            state_operations=[
                migrations.RemoveConstraint("span", "span_unique_per_trace"),
                migrations.AlterField("span", "trace_day", models.DateField()),
                migrations.AddConstraint("span", NEW_UNIQUE),
            ],
            database_operations=[migrations.RunPython(span_table_convert, span_table_revert)],
        ),
    ]
