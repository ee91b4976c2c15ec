from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "clear.projects"
    label = "projects"
    verbose_name = "Projects and access"

    def ready(self) -> None:
        from clear.projects import schema  # noqa: F401  registers the OpenAPI security scheme
