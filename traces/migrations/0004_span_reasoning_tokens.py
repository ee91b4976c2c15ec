"""Span.reasoning_tokens: the reasoning part of output_tokens (traces/normalize/MAPPING.md)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0003_outboxitem_moved"),
    ]

    operations = [
        migrations.AddField(
            model_name="span",
            name="reasoning_tokens",
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
