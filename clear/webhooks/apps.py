from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "clear.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"
