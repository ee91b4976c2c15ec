from django.urls import path

from clear.api.routing import api_route
from diagnosis import apis, apis_insights
from diagnosis.attribution.apis import InsightAttributionApi

app_name = "diagnosis"

urlpatterns = [
    # /api/v1/runs/
    path("api/v1/runs/", api_route(get=apis.RunListApi, post=apis.RunCreateApi), name="run-list"),
    path("api/v1/runs/<uuid:run_id>/", apis.RunDetailApi.as_view(), name="run-detail"),
    path("api/v1/runs/<uuid:run_id>/cancel/", apis.RunCancelApi.as_view(), name="run-cancel"),
    path("api/v1/runs/<uuid:run_id>/retry-errors/", apis.RunRetryErrorsApi.as_view(), name="run-retry-errors"),
    # /api/v1/feedback/
    path("api/v1/feedback/", apis.FeedbackListApi.as_view(), name="feedback-list"),
    # /api/v1/rubrics/
    path("api/v1/rubrics/", api_route(get=apis.RubricListApi, post=apis.RubricCreateApi), name="rubric-list"),
    path("api/v1/rubrics/<int:rubric_id>/",
         api_route(get=apis.RubricDetailApi, patch=apis.RubricUpdateApi, delete=apis.RubricDeleteApi),
         name="rubric-detail"),
    # /api/v1/insights/ and their review
    path("api/v1/insights/", apis_insights.InsightListApi.as_view(), name="insight-list"),
    path("api/v1/insights/<int:insight_id>/", apis_insights.InsightDetailApi.as_view(), name="insight-detail"),
    path("api/v1/insights/<int:insight_id>/evidence/", apis_insights.InsightEvidenceListApi.as_view(),
         name="insight-evidence"),
    path("api/v1/insights/<int:insight_id>/attribution/", InsightAttributionApi.as_view(),
         name="insight-attribution"),
    path("api/v1/insights/<int:insight_id>/statements/", apis_insights.InsightStatementListApi.as_view(),
         name="insight-statements"),
    path("api/v1/insights/<int:insight_id>/confirm/", apis_insights.InsightConfirmApi.as_view(),
         name="insight-confirm"),
    path("api/v1/insights/<int:insight_id>/reject/", apis_insights.InsightRejectApi.as_view(),
         name="insight-reject"),
    path("api/v1/insights/<int:insight_id>/status/", apis_insights.InsightStatusApi.as_view(),
         name="insight-status"),
    path("api/v1/insights/<int:insight_id>/merge/", apis_insights.InsightMergeApi.as_view(), name="insight-merge"),
    path("api/v1/insights/<int:insight_id>/split/", apis_insights.InsightSplitApi.as_view(), name="insight-split"),
    # /api/v1/compare/
    path("api/v1/compare/", apis_insights.CompareApi.as_view(), name="compare"),
]
