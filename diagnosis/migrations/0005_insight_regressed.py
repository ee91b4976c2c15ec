from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("diagnosis", "0004_insight_by_design"),
    ]

    operations = [
        migrations.AddField(
            model_name="insight",
            name="regressed_in_release",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name="insight",
            name="regressed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
