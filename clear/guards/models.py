from django.db import models


class GuardEntry(models.Model):
    """One entry of a GuardCache (clear/guards/cache.py): an integer in `count`, anything else pickled in `value`.
    Counters are integers so that an increment is one UPDATE ... SET count = count + 1, never a read and a write."""

    key = models.CharField(max_length=400, primary_key=True)  # "<cache location>/<Django's cache key>"
    value = models.BinaryField(null=True)
    count = models.BigIntegerField(null=True)
    expires_at = models.FloatField(null=True, db_index=True)  # Unix time; null: never

    class Meta:
        db_table = "clear_guard_entry"
