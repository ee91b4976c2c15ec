from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import views, views_insights, views_runs, views_settings, views_tracker, views_traces

app_name = "frontend"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="frontend/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    # Every project page lives under /p/<slug>/.
    path("p/<slug:slug>/", views.overview, name="overview"),
    path("p/<slug:slug>/workflow/", views.workflow, name="workflow"),
    path("p/<slug:slug>/nodes/", views.nodes, name="nodes"),
    path("p/<slug:slug>/traces/", views_traces.trace_list, name="traces"),
    path("p/<slug:slug>/traces/<str:trace_id>/", views_traces.trace_detail, name="trace"),
    path("p/<slug:slug>/feedback/<int:feedback_id>/mark-wrong/", views_traces.feedback_mark_wrong,
         name="feedback-mark-wrong"),
    path("p/<slug:slug>/insights/", views_insights.insight_list_view, name="insights"),
    path("p/<slug:slug>/insights/<int:insight_id>/", views_insights.insight_detail, name="insight"),
    path("p/<slug:slug>/insights/<int:insight_id>/review/", views_insights.insight_review, name="insight-review"),
    path("p/<slug:slug>/insights/<int:insight_id>/status/", views_insights.insight_status, name="insight-status"),
    path("p/<slug:slug>/tickets/", views_insights.ticket_list_view, name="tickets"),
    path("p/<slug:slug>/tickets/export/", views_insights.ticket_export, name="tickets-export"),
    path("p/<slug:slug>/tickets/<int:ticket_id>/status/", views_insights.ticket_status, name="ticket-status"),
    path("p/<slug:slug>/tickets/push/", views_tracker.tickets_push_view, name="tickets-push"),
    path("p/<slug:slug>/runs/", views_runs.run_list, name="runs"),
    path("p/<slug:slug>/runs/new/", views_runs.run_new, name="run-new"),
    path("p/<slug:slug>/runs/<uuid:run_id>/", views_runs.run_detail, name="run"),
    path("p/<slug:slug>/runs/<uuid:run_id>/status.json", views_runs.run_status, name="run-status"),
    path("p/<slug:slug>/runs/<uuid:run_id>/cancel/", views_runs.run_cancel, name="run-cancel"),
    path("p/<slug:slug>/settings/api-keys/", views.api_keys, name="api-keys"),
    path("p/<slug:slug>/settings/api-keys/create/", views.api_key_create_view, name="api-key-create"),
    path("p/<slug:slug>/settings/api-keys/<int:key_id>/revoke/", views.api_key_revoke_view, name="api-key-revoke"),
    path("p/<slug:slug>/settings/rubrics/", views_settings.rubrics, name="rubrics"),
    path("p/<slug:slug>/settings/rubrics/<int:rubric_id>/", views_settings.rubric_edit, name="rubric-edit"),
    path("p/<slug:slug>/settings/rubrics/<int:rubric_id>/toggle/", views_settings.rubric_toggle,
         name="rubric-toggle"),
    path("p/<slug:slug>/settings/rubrics/<int:rubric_id>/delete/", views_settings.rubric_remove,
         name="rubric-delete"),
    path("p/<slug:slug>/settings/judge/", views_settings.judge_model, name="judge-model"),
    path("p/<slug:slug>/settings/issue-tracker/", views_tracker.issue_tracker, name="issue-tracker"),
    path("p/<slug:slug>/settings/issue-tracker/disconnect/", views_tracker.issue_tracker_remove,
         name="issue-tracker-disconnect"),
]
