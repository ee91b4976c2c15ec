"""The base of every /api/v1/ endpoint: project-key authentication, the per-key rate limit, JSON bodies only, and
no query parameter the operation does not read."""

from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.views import APIView

from clear.api.query import KnownQueryParameters
from clear.api.throttling import ApiKeyRateThrottle
from clear.projects.apis import request_project
from clear.projects.authentication import ProjectKeyAuthentication
from clear.projects.models import Project


class ProjectApi(KnownQueryParameters, APIView):
    """One operation on the key's project. Subclasses implement one HTTP method: validate → service or selector →
    serialize, and look objects up through selectors that take `project=` (another project's id is a 404)."""

    authentication_classes = [ProjectKeyAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [ApiKeyRateThrottle]
    parser_classes = [JSONParser]

    def project(self, request: Request) -> Project:
        return request_project(request)
