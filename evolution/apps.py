from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evolution"
