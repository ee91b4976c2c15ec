from django.db import migrations, models


class Migration(migrations.Migration):
    """A target's repository is read by a worker: `cloning` until then, `ready` or `failed` after. Existing targets
    were read when they were registered: `ready`."""

    dependencies = [
        ("evolution", "0003_release_zero_base_and_rollbacks"),
    ]

    operations = [
        migrations.AlterField(
            model_name="evolutiontarget",
            name="config",
            field=models.JSONField(default=dict, help_text="validated by evolution.config.target_config_validate; "
                                                           "empty until the repository's evolution.json of a new "
                                                           "target is read"),
        ),
        migrations.AddField(
            model_name="evolutiontarget",
            name="config_requested",
            field=models.JSONField(blank=True, null=True, help_text="a new target's config as given (null: its "
                                                                    "evolution.json alone), checked against the "
                                                                    "repository by the clone"),
        ),
        migrations.AddField(
            model_name="evolutiontarget",
            name="state",
            field=models.CharField(choices=[("cloning", "Cloning"), ("ready", "Ready"), ("failed", "Failed")],
                                   default="ready", max_length=10),
        ),
        migrations.AddField(
            model_name="evolutiontarget",
            name="state_reason",
            field=models.TextField(blank=True, help_text="failed: why, in Clear's words (never git's output)"),
        ),
        migrations.AddField(
            model_name="evolutiontarget",
            name="state_changed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="evolutiontarget",
            name="state_version",
            field=models.PositiveIntegerField(default=0, help_text="one more per clone asked for; a clone's outcome "
                                                                   "is kept only if none was asked since"),
        ),
        migrations.AddField(
            model_name="evolutiontarget",
            name="clone_started_at",
            field=models.DateTimeField(blank=True, null=True, help_text="the worker's claim of the clone"),
        ),
    ]
