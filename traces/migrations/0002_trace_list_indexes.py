
import django.db.models.functions.comparison
from django.db import migrations, models


class PostgresAddIndex(migrations.AddIndex):
    """The index on Postgres only: SQLite (the embedded default, small projects) refuses NULLS LAST in an index."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):

    dependencies = [
        ('projects', '0001_initial'),
        ('traces', '0001_initial'),
    ]

    operations = [
        PostgresAddIndex(
            model_name='trace',
            index=models.Index(models.F('project'), models.OrderBy(models.F('start_time'), descending=True, nulls_last=True), models.OrderBy(models.F('id'), descending=True), name='trace_project_start_list'),
        ),
        PostgresAddIndex(
            model_name='trace',
            index=models.Index(models.F('project'), models.OrderBy(django.db.models.functions.comparison.Coalesce('start_time', 'first_received_at'), descending=True), models.OrderBy(models.F('id'), descending=True), name='trace_project_sort_time'),
        ),
    ]
