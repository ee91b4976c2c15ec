from django.urls import path

from clear.api.routing import api_route
from clear.webhooks import apis

app_name = "webhooks"

urlpatterns = [
    # /api/v1/webhooks/
    path("api/v1/webhooks/", api_route(get=apis.WebhookListApi, post=apis.WebhookCreateApi), name="webhook-list"),
    path("api/v1/webhooks/<int:webhook_id>/",
         api_route(get=apis.WebhookDetailApi, patch=apis.WebhookUpdateApi, delete=apis.WebhookDeleteApi),
         name="webhook-detail"),
    path("api/v1/webhooks/<int:webhook_id>/deliveries/", apis.WebhookDeliveryListApi.as_view(),
         name="webhook-deliveries"),
    path("api/v1/webhooks/<int:webhook_id>/ping/", apis.WebhookPingApi.as_view(), name="webhook-ping"),
]
