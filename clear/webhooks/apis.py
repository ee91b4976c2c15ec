"""REST API of webhooks (project API keys): subscriptions, their delivery log, and a test ping.

One class per operation: validate → service or selector → serialize. Errors are ClearErrors ({message, code, extra}).
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from clear.webhooks.models import Webhook, WebhookDelivery
from clear.webhooks.selectors import webhook_delivery_list, webhook_get, webhook_list
from clear.webhooks.services import EVENTS, webhook_create, webhook_delete, webhook_ping, webhook_update


class WebhookOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.URLField()
    events = serializers.ListField(child=serializers.CharField())
    active = serializers.BooleanField()
    description = serializers.CharField()
    secret_hint = serializers.SerializerMethodField(help_text="the secret's first characters")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_secret_hint(self, webhook: Webhook) -> str:
        return webhook.secret[:10] + "…"


class WebhookInputSerializer(serializers.Serializer):
    url = serializers.URLField(max_length=2000, help_text=(
        "http:// or https://; its host must be a public address (a host that is or resolves to a loopback, "
        "private, link-local, multicast or reserved address is refused with 400)"))
    events = serializers.ListField(child=serializers.ChoiceField(choices=list(EVENTS)), min_length=1,
                                   help_text=", ".join(EVENTS))
    secret = serializers.CharField(required=False, min_length=16, max_length=200,
                                   help_text="signs the bodies; generated when left out")
    active = serializers.BooleanField(required=False, default=True)
    description = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)


class DeliveryOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="the X-Clear-Delivery header")
    event = serializers.CharField()
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.values)
    attempts = serializers.IntegerField()
    response_code = serializers.IntegerField(allow_null=True)
    response_body = serializers.CharField(help_text="the first 1 KB of the last response's body; only from public "
                                                    "addresses")
    error = serializers.CharField(help_text="why the last attempt got no answer, its class first (ConnectionError, "
                                            "ReadTimeout, NameResolutionError, TargetRefused: …)")
    payload = serializers.JSONField(help_text="the JSON body sent")
    created_at = serializers.DateTimeField()
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    delivered_at = serializers.DateTimeField(allow_null=True)


WEBHOOK_ID_PARAMETER = OpenApiParameter("webhook_id", int, OpenApiParameter.PATH)


class WebhookListApi(ProjectApi):
    """The project's webhooks."""

    is_paginated = True

    @extend_schema(operation_id="webhooks_list", parameters=PAGINATION_PARAMETERS,
                   responses=paginated(WebhookOutputSerializer, "PaginatedWebhookList"))
    def get(self, request: Request) -> Response:
        page = paginate(queryset=webhook_list(project=self.project(request)), request=request, ordering=("pk",))
        return Response(page_body(page=page, results=WebhookOutputSerializer(page.rows, many=True).data))


class WebhookCreateApi(ProjectApi):
    """Subscribe a URL to events. The response holds the signing secret (shown in full only here). A URL whose
    host is not a public address is refused (400, code webhook_target_refused)."""

    class OutputSerializer(WebhookOutputSerializer):
        secret = serializers.CharField()

    @extend_schema(operation_id="webhooks_create", request=WebhookInputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        data = WebhookInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        webhook = webhook_create(project=self.project(request), **data.validated_data)
        return Response(self.OutputSerializer(webhook).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(ProjectApi):
    """One webhook."""

    @extend_schema(operation_id="webhooks_retrieve", parameters=[WEBHOOK_ID_PARAMETER],
                   responses=WebhookOutputSerializer)
    def get(self, request: Request, webhook_id: int) -> Response:
        webhook = webhook_get(project=self.project(request), webhook_id=webhook_id)
        return Response(WebhookOutputSerializer(webhook).data)


class WebhookUpdateApi(ProjectApi):
    """Change some of a webhook's fields (a new secret applies to the next attempt)."""

    @extend_schema(operation_id="webhooks_partial_update", parameters=[WEBHOOK_ID_PARAMETER],
                   request=WebhookInputSerializer(partial=True), responses=WebhookOutputSerializer)
    def patch(self, request: Request, webhook_id: int) -> Response:
        webhook = webhook_get(project=self.project(request), webhook_id=webhook_id)
        data = WebhookInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        webhook = webhook_update(webhook=webhook, **data.validated_data)
        return Response(WebhookOutputSerializer(webhook).data)


class WebhookDeleteApi(ProjectApi):
    """Delete a webhook and its delivery log."""

    @extend_schema(operation_id="webhooks_destroy", parameters=[WEBHOOK_ID_PARAMETER], responses={204: None})
    def delete(self, request: Request, webhook_id: int) -> Response:
        webhook_delete(webhook=webhook_get(project=self.project(request), webhook_id=webhook_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookDeliveryListApi(ProjectApi):
    """A webhook's deliveries, newest first: each event sent, its attempts and the last response."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=WebhookDelivery.Status.values, required=False)

    @extend_schema(operation_id="webhooks_deliveries_list",
                   parameters=[WEBHOOK_ID_PARAMETER, FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(DeliveryOutputSerializer, "PaginatedWebhookDeliveryList"))
    def get(self, request: Request, webhook_id: int) -> Response:
        project = self.project(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        webhook = webhook_get(project=project, webhook_id=webhook_id)
        deliveries = webhook_delivery_list(project=project, webhook=webhook, status=filters.validated_data.get("status"))
        page = paginate(queryset=deliveries, request=request, ordering=("-created_at", "-pk"))
        return Response(page_body(page=page, results=DeliveryOutputSerializer(page.rows, many=True).data))


class WebhookPingApi(ProjectApi):
    """Send a `webhook.ping` event to this webhook now (to check the URL and the signature check)."""

    @extend_schema(operation_id="webhooks_ping", parameters=[WEBHOOK_ID_PARAMETER], request=None,
                   responses={202: DeliveryOutputSerializer})
    def post(self, request: Request, webhook_id: int) -> Response:
        delivery = webhook_ping(webhook=webhook_get(project=self.project(request), webhook_id=webhook_id))
        delivery.refresh_from_db()
        return Response(DeliveryOutputSerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
