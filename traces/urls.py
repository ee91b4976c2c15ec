from django.urls import path

from clear.api.routing import api_route
from traces import apis

app_name = "traces"

urlpatterns = [
    path("v1/traces", apis.otlp_traces, name="otlp-traces"),
    path("api/public/otel/v1/traces", apis.otlp_traces, name="langfuse-otlp-traces"),
    path("api/public/ingestion", apis.langfuse_ingestion, name="langfuse-ingestion"),
    path("api/public/scores", apis.langfuse_scores, name="langfuse-scores"),
    # /api/v1/traces/
    path("api/v1/traces/", apis.TraceListApi.as_view(), name="trace-list"),
    path("api/v1/traces/<str:trace_id>/", api_route(get=apis.TraceDetailApi, delete=apis.TraceDeleteApi),
         name="trace-detail"),
    path("api/v1/traces/<str:trace_id>/outcome/", apis.TraceOutcomeApi.as_view(), name="trace-outcome"),
]
