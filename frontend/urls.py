from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import views

app_name = "frontend"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="frontend/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    # /p/<slug>/
    path("p/<slug:slug>/", views.overview, name="overview"),
    # /p/<slug>/settings/api-keys/
    path("p/<slug:slug>/settings/api-keys/", views.api_keys, name="api-keys"),
    path("p/<slug:slug>/settings/api-keys/create/", views.api_key_create_view, name="api-key-create"),
    path("p/<slug:slug>/settings/api-keys/<int:key_id>/revoke/", views.api_key_revoke_view, name="api-key-revoke"),
]
