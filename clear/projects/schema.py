from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ProjectKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "clear.projects.authentication.ProjectKeyAuthentication"
    name = "projectKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A project's secret key (sk-clear-…); HTTP Basic '<public key>:<secret key>' also works.",
        }
