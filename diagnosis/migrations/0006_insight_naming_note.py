from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("diagnosis", "0005_insight_regressed"),
    ]

    operations = [
        migrations.AddField(
            model_name="insight",
            name="naming_note",
            field=models.TextField(
                blank=True, help_text="why the model's title and text were replaced by the computed ones (they echoed "
                                      "the prompt or were not grounded), else empty"),
        ),
    ]
