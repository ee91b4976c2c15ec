from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from clear.api.views import ApiNotFoundApi
from clear.projects import apis as project_apis

api_v1 = [
    path("project/", project_apis.ProjectCurrentApi.as_view(), name="project-current"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"))),
    path("api/public/projects", project_apis.LangfuseProjectListApi.as_view(), name="langfuse-projects"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The Content-Security-Policy (clear/csp.py) allows no inline script or style: Swagger UI's init script is
    # served as a file (the split view) and its page has no <style>. Redoc injects inline styles: its old address
    # sends people to Swagger UI.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="frontend/api_docs.html"),
         name="api-docs"),
    path("api/redoc/", RedirectView.as_view(pattern_name="api-docs", permanent=False), name="api-redoc"),
    path("", include("traces.urls")),
    path("", include("diagnosis.urls")),
    path("", include("diagnosis.tickets.urls")),
    path("", include("evolution.urls")),
    path("", include("clear.webhooks.urls")),
    # Any other /api/v1/ path: a 404 in the API's error body, not the HTML page (after every app's API routes).
    re_path(r"^api/v1/", ApiNotFoundApi.as_view(), name="api-not-found"),
    path("", include("frontend.urls")),
]

# Styled pages with the navigation (and the API's error body under /api/ and /v1/); the traceback goes to the log.
handler403 = "frontend.views_errors.permission_denied"
handler404 = "frontend.views_errors.page_not_found"
handler500 = "frontend.views_errors.server_error"
