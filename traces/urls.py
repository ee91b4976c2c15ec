from django.urls import path

from traces import apis

app_name = "traces"

urlpatterns = [
    path("v1/traces", apis.otlp_traces, name="otlp-traces"),
    path("api/public/otel/v1/traces", apis.otlp_traces, name="langfuse-otlp-traces"),
    path("api/public/ingestion", apis.langfuse_ingestion, name="langfuse-ingestion"),
    path("api/public/scores", apis.langfuse_scores, name="langfuse-scores"),
]
