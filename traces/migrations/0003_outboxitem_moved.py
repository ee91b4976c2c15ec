"""OutboxItem moved to clear.outbox (outbox 0001): state only, the table stays."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("traces", "0002_trace_list_indexes"),
        ("outbox", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="OutboxItem")],
            database_operations=[],
        ),
    ]
