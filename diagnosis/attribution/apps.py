from django.apps import AppConfig


class AttributionConfig(AppConfig):
    name = "diagnosis.attribution"
    label = "attribution"
    verbose_name = "Failure attribution"
