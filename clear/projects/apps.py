from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "clear.projects"
    label = "projects"
    verbose_name = "Projects and access"

    def ready(self) -> None:
        from clear.projects import checks, schema  # noqa: F401  register the settings check, the OpenAPI scheme
