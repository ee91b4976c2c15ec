from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clear.api.query import KnownQueryParameters
from clear.errors import HOW_TO_AUTHENTICATE, AuthenticationError
from clear.projects.authentication import ProjectKeyAuthentication, ProjectKeyUser
from clear.projects.models import Project


def request_project(request: Request) -> Project:
    """The project a key-authenticated request acts on."""
    if not isinstance(request.user, ProjectKeyUser):
        raise AuthenticationError("This endpoint needs a project API key. " + HOW_TO_AUTHENTICATE)
    return request.user.project


class ProjectCurrentApi(KnownQueryParameters, APIView):
    """The project the presented API key belongs to (a cheap way to check credentials)."""

    authentication_classes = [ProjectKeyAuthentication]

    class OutputSerializer(serializers.Serializer):
        id = serializers.UUIDField()
        name = serializers.CharField()
        slug = serializers.CharField()
        public_key = serializers.CharField()

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        project = request_project(request)
        data = {"id": project.id, "name": project.name, "slug": project.slug, "public_key": request.auth.public_key}
        return Response(self.OutputSerializer(data).data)


class LangfuseProjectListApi(APIView):
    """`GET /api/public/projects`: the Langfuse SDK calls it to check its credentials."""

    authentication_classes = [ProjectKeyAuthentication]

    @extend_schema(
        responses=inline_serializer(
            "LangfuseProjectList",
            {"data": serializers.ListField(child=inline_serializer("LangfuseProject", {
                "id": serializers.CharField(), "name": serializers.CharField(), "metadata": serializers.DictField(),
                "organization": serializers.DictField()}))},
        )
    )
    def get(self, request: Request) -> Response:
        project = request_project(request)
        # The SDK validates this shape (organization and metadata are required fields).
        return Response({"data": [{
            "id": str(project.id), "name": project.name, "metadata": {},
            "organization": {"id": "clear", "name": "Clear"},
        }]})
