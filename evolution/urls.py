from django.urls import path

from clear.api.routing import api_route
from evolution import apis

app_name = "evolution"

urlpatterns = [
    # /api/v1/evolution/targets/
    path("api/v1/evolution/targets/", api_route(get=apis.TargetListApi, post=apis.TargetCreateApi),
         name="target-list"),
    path("api/v1/evolution/targets/<int:target_id>/",
         api_route(get=apis.TargetDetailApi, patch=apis.TargetUpdateApi, delete=apis.TargetDeleteApi),
         name="target-detail"),
    path("api/v1/evolution/targets/<int:target_id>/releases/", apis.TargetReleasesApi.as_view(),
         name="target-releases"),
    path("api/v1/evolution/targets/<int:target_id>/rollback/", apis.TargetRollbackApi.as_view(),
         name="target-rollback"),
    # /api/v1/evolution/jobs/
    path("api/v1/evolution/jobs/", api_route(get=apis.JobListApi, post=apis.JobCreateApi), name="job-list"),
    path("api/v1/evolution/jobs/<int:job_id>/", apis.JobDetailApi.as_view(), name="job-detail"),
    path("api/v1/evolution/jobs/<int:job_id>/cancel/", apis.JobCancelApi.as_view(), name="job-cancel"),
    path("api/v1/evolution/jobs/<int:job_id>/approve/", apis.JobApproveApi.as_view(), name="job-approve"),
    path("api/v1/evolution/jobs/<int:job_id>/discard/", apis.JobDiscardApi.as_view(), name="job-discard"),
    path("api/v1/evolution/jobs/<int:job_id>/merged/", apis.JobMergedApi.as_view(), name="job-merged"),
    path("api/v1/evolution/jobs/<int:job_id>/artifacts/<int:artifact_id>/", apis.JobArtifactApi.as_view(),
         name="job-artifact"),
]
