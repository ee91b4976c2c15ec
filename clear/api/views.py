"""Answers for /api/v1/ paths no endpoint serves: the same error body as everything else under /api/v1/."""

from django.urls import Resolver404, resolve
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from clear.errors import NotFoundError


@extend_schema(exclude=True)
class ApiNotFoundApi(APIView):
    authentication_classes = []
    permission_classes = []
    throttle_classes = []

    def _not_found(self, request: Request, *args, **kwargs):
        path = request.path
        message = f"No API endpoint at {path}; see /api/docs/ for the list."
        if not path.endswith("/"):
            try:
                match = resolve(path + "/")
            except Resolver404:
                match = None
            if match is not None and getattr(match.func, "view_class", None) is not ApiNotFoundApi:
                message = f"No API endpoint at {path}; did you mean {path}/ (with the trailing slash)?"
        raise NotFoundError(message, code="no_endpoint")

    get = post = put = patch = delete = head = options = _not_found
