from django.urls import path

from clear.api.routing import api_route
from evolution.apis import jobs, targets

app_name = "evolution"

urlpatterns = [
    # /api/v1/evolution/targets/
    path("api/v1/evolution/targets/", api_route(get=targets.TargetListApi, post=targets.TargetCreateApi),
         name="target-list"),
    path("api/v1/evolution/targets/<int:target_id>/",
         api_route(get=targets.TargetDetailApi, patch=targets.TargetUpdateApi, delete=targets.TargetDeleteApi),
         name="target-detail"),
    path("api/v1/evolution/targets/<int:target_id>/releases/", targets.TargetReleasesApi.as_view(),
         name="target-releases"),
    path("api/v1/evolution/targets/<int:target_id>/rollback/", targets.TargetRollbackApi.as_view(),
         name="target-rollback"),
    path("api/v1/evolution/targets/<int:target_id>/rollbacks/<int:rollback_id>/",
         targets.TargetRollbackDetailApi.as_view(), name="target-rollback-detail"),
    # /api/v1/evolution/jobs/
    path("api/v1/evolution/jobs/", api_route(get=jobs.JobListApi, post=jobs.JobCreateApi), name="job-list"),
    path("api/v1/evolution/jobs/<int:job_id>/", jobs.JobDetailApi.as_view(), name="job-detail"),
    path("api/v1/evolution/jobs/<int:job_id>/cancel/", jobs.JobCancelApi.as_view(), name="job-cancel"),
    path("api/v1/evolution/jobs/<int:job_id>/approve/", jobs.JobApproveApi.as_view(), name="job-approve"),
    path("api/v1/evolution/jobs/<int:job_id>/discard/", jobs.JobDiscardApi.as_view(), name="job-discard"),
    path("api/v1/evolution/jobs/<int:job_id>/merged/", jobs.JobMergedApi.as_view(), name="job-merged"),
    path("api/v1/evolution/jobs/<int:job_id>/artifacts/<int:artifact_id>/", jobs.JobArtifactApi.as_view(),
         name="job-artifact"),
]
