from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from clear.projects import apis as project_apis

api_v1 = [
    path("project/", project_apis.ProjectCurrentApi.as_view(), name="project-current"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"))),
    path("api/public/projects", project_apis.LangfuseProjectListApi.as_view(), name="langfuse-projects"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("", include("traces.urls")),
    path("", include("diagnosis.urls")),
    path("", include("evolution.urls")),
    path("", include("frontend.urls")),
]
