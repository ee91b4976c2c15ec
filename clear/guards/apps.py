from django.apps import AppConfig


class GuardsConfig(AppConfig):
    name = "clear.guards"
    label = "guards"
    verbose_name = "Guard state (throttles, dashboard cache)"
