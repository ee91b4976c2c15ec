"""One URL served by several one-operation API classes, e.g. `GET` and `DELETE /api/v1/traces/{trace_id}/`."""

import functools
from collections.abc import Callable

from rest_framework.views import APIView


def api_route(**views: type[APIView]) -> Callable:
    """`api_route(get=TraceDetailApi, delete=TraceDeleteApi)`: each request goes to its method's class, which
    authenticates, throttles and handles errors as usual. Other methods get 405 (after authentication).

    drf-spectacular reads the method functions (and their @extend_schema) from the combined class, so every
    operation keeps its own schema.
    """
    handlers = {method.lower(): view.as_view() for method, view in views.items()}
    first = next(iter(views.values()))

    def dispatch(self, request, *args, **kwargs):
        method = request.method.lower()
        handler = handlers.get(method) or (handlers.get("get") if method == "head" else None)
        if handler is None:
            return APIView.dispatch(self, request, *args, **kwargs)
        return handler(request, *args, **kwargs)

    attrs = {method.lower(): _schema_method(view, method.lower()) for method, view in views.items()}
    attrs.update(
        dispatch=dispatch,
        __module__=first.__module__,
        __doc__=None,
        authentication_classes=first.authentication_classes,
        permission_classes=first.permission_classes,
        throttle_classes=first.throttle_classes,
        parser_classes=first.parser_classes,
    )
    name = "".join(view.__name__.removesuffix("Api") for view in views.values()) + "Route"
    return type(name, (APIView,), attrs).as_view()


def _schema_method(view: type[APIView], name: str) -> Callable:
    """The view's handler as seen by drf-spectacular (never called: dispatch goes to the view itself), described by
    the view's docstring when the handler has none."""
    func = getattr(view, name)

    @functools.wraps(func)
    def method(self, *args, **kwargs):  # pragma: no cover - dispatch() sends every method to its own view
        raise NotImplementedError

    method.__doc__ = func.__doc__ or view.__doc__
    return method
