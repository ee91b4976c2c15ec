"""OutboxItem moves here from the traces app: state only, the table (traces_outboxitem) stays as it is."""

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("traces", "0002_trace_list_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="OutboxItem",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("topic", models.CharField(max_length=100)),
                        ("key", models.CharField(max_length=200)),
                        ("payload", models.JSONField(default=dict)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("available_at", models.DateTimeField()),
                        ("dispatched_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("last_error", models.TextField(blank=True)),
                    ],
                    options={
                        "db_table": "traces_outboxitem",
                        "indexes": [models.Index(fields=["dispatched_at", "available_at"], name="outbox_pending")],
                        "constraints": [models.UniqueConstraint(condition=models.Q(("dispatched_at__isnull", True)),
                                                                fields=("topic", "key"),
                                                                name="outbox_pending_unique")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
