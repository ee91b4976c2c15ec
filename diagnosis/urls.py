from django.urls import path

from diagnosis import apis

app_name = "diagnosis"

urlpatterns = [
    path("api/v1/diagnosis/runs", apis.DiagnosisRunListApi.as_view(), name="run-list"),
    path("api/v1/diagnosis/runs/create", apis.DiagnosisRunCreateApi.as_view(), name="run-create"),
    path("api/v1/diagnosis/runs/<uuid:run_id>", apis.DiagnosisRunDetailApi.as_view(), name="run-detail"),
    path("api/v1/diagnosis/runs/<uuid:run_id>/cancel", apis.DiagnosisRunCancelApi.as_view(), name="run-cancel"),
    path("api/v1/diagnosis/runs/<uuid:run_id>/feedback", apis.FeedbackListApi.as_view(), name="run-feedback"),
    path("api/v1/rubrics", apis.RubricListApi.as_view(), name="rubric-list"),
    path("api/v1/rubrics/create", apis.RubricCreateApi.as_view(), name="rubric-create"),
    path("api/v1/rubrics/<int:rubric_id>/update", apis.RubricUpdateApi.as_view(), name="rubric-update"),
    path("api/v1/rubrics/<int:rubric_id>/delete", apis.RubricDeleteApi.as_view(), name="rubric-delete"),
]
