from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "clear.outbox"
    label = "outbox"
    verbose_name = "Outbox"
