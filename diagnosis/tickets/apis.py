"""REST API of tickets (/api/v1/tickets/): list, detail, status, the bug list export, push, the tracker connection.

One class per operation: validate → service or selector → serialize. Errors are ClearErrors ({message, code, extra}).
"""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clear.api.base import ProjectApi
from clear.api.pagination import PAGINATION_PARAMETERS, page_body, paginate, paginated
from diagnosis.models import Insight

from .export import CONTENT_TYPES, OUTPUTS, tickets_export
from .models import Ticket
from .push import tickets_push_request
from .selectors import STATUS_FILTERS, issue_tracker_get, ticket_get, ticket_list
from .services import issue_tracker_connect, issue_tracker_disconnect, ticket_status_set


class EvidenceSerializer(serializers.Serializer):
    trace_id = serializers.CharField()
    task_id = serializers.CharField()
    release = serializers.CharField()
    span_id = serializers.CharField()
    quote = serializers.CharField(help_text="as the judge cited it: untrusted trace content, escape before display; "
                                            "empty once removed (quote_removed)")
    statement = serializers.CharField()
    expired_at = serializers.DateTimeField(required=False, help_text="only when retention removed the trace: when")
    retention_days = serializers.IntegerField(required=False, allow_null=True,
                                              help_text="only when retention removed the trace: its retention")
    quote_removed = serializers.BooleanField(
        required=False, help_text="the quote went with its expired trace (CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES off)")


class TraceRefSerializer(serializers.Serializer):
    trace_id = serializers.CharField()
    task_id = serializers.CharField()
    release = serializers.CharField()
    outcome = serializers.CharField(help_text="success, failure or empty")


class TicketOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    fingerprint = serializers.CharField()
    status = serializers.ChoiceField(choices=Ticket.Status.values)
    title = serializers.CharField()
    level = serializers.CharField()
    node = serializers.CharField()
    severity = serializers.CharField()
    insight_id = serializers.IntegerField(allow_null=True)
    frequency = serializers.FloatField()
    trace_count = serializers.IntegerField()
    lift = serializers.FloatField(allow_null=True)
    lift_low = serializers.FloatField(allow_null=True)
    lift_high = serializers.FloatField(allow_null=True)
    candidate = serializers.BooleanField(
        help_text="made from an inconclusive insight (its failure_inconclusive): failing traces show the pattern more "
                  "often, but too few traces for the lift interval to clear 1; not yet shown to go with failure")
    first_seen = serializers.DateTimeField(allow_null=True)
    last_seen = serializers.DateTimeField(allow_null=True)
    merged_into_id = serializers.IntegerField(allow_null=True)
    external_number = serializers.IntegerField(allow_null=True, help_text="the issue's number on the tracker")
    external_url = serializers.CharField(help_text="the issue's page, only when https on the tracker's own host")
    push_error = serializers.CharField(help_text="the tracker's HTTP status and a fixed reason, never its own words")
    reopen_count = serializers.IntegerField()
    status_changed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class TicketDetailOutputSerializer(TicketOutputSerializer):
    body = serializers.CharField(help_text="Markdown; trace content in it is escaped")
    description = serializers.CharField()
    root_cause = serializers.CharField()
    recommendation = serializers.CharField()
    evidence = EvidenceSerializer(many=True)
    traces = TraceRefSerializer(many=True)
    trace_total = serializers.IntegerField()


class TicketListApi(ProjectApi):
    """The project's tickets (one per insight fingerprint), newest first."""

    is_paginated = True

    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=STATUS_FILTERS, required=False, default="all",
                                         help_text='"open" is every unresolved ticket (open and in_progress)')
        level = serializers.ChoiceField(choices=Insight.Level.values, required=False)
        node = serializers.CharField(required=False, max_length=300)
        severity = serializers.ChoiceField(choices=Insight.Severity.values, required=False)
        insight_id = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)

    @extend_schema(operation_id="tickets_list", parameters=[FilterSerializer, *PAGINATION_PARAMETERS],
                   responses=paginated(TicketOutputSerializer, "PaginatedTicketList"))
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        tickets = ticket_list(project=self.project(request), **filters.validated_data)
        page = paginate(queryset=tickets, request=request, ordering=("-pk",))
        return Response(page_body(page=page, results=TicketOutputSerializer(page.rows, many=True).data))


class TicketDetailApi(ProjectApi):
    """One ticket with its Markdown body, evidence and affected traces."""

    @extend_schema(operation_id="tickets_retrieve", responses=TicketDetailOutputSerializer)
    def get(self, request: Request, ticket_id: int) -> Response:
        ticket = ticket_get(project=self.project(request), ticket_id=ticket_id)
        return Response(TicketDetailOutputSerializer(ticket).data)


class TicketUpdateApi(ProjectApi):
    """Set a ticket's status; its insight follows (fixed → fixed, wont_fix → ignored, in_progress → acknowledged,
    open → open)."""

    class InputSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=Ticket.Status.values)
        note = serializers.CharField(required=False, default="", allow_blank=True, max_length=2000)

    @extend_schema(operation_id="tickets_partial_update", request=InputSerializer,
                   responses=TicketDetailOutputSerializer)
    def patch(self, request: Request, ticket_id: int) -> Response:
        project = self.project(request)
        ticket = ticket_get(project=project, ticket_id=ticket_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        ticket = ticket_status_set(project=project, ticket=ticket, **data.validated_data)
        return Response(TicketDetailOutputSerializer(ticket).data)


class TicketExportApi(ProjectApi):
    """The bug list as a file: Markdown, CSV or JSON."""

    class FilterSerializer(serializers.Serializer):
        output = serializers.ChoiceField(choices=OUTPUTS, required=False, default="md")
        status = serializers.ChoiceField(choices=STATUS_FILTERS, required=False, default="open",
                                         help_text='"open" is every unresolved ticket (open and in_progress)')

    @extend_schema(operation_id="tickets_export", parameters=[FilterSerializer],
                   responses={(200, "text/markdown"): OpenApiTypes.STR, (200, "text/csv"): OpenApiTypes.STR,
                              (200, "application/json"): OpenApiTypes.OBJECT})
    def get(self, request: Request) -> HttpResponse:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        output = filters.validated_data["output"]
        project = self.project(request)
        text = tickets_export(project=project, output=output, status=filters.validated_data["status"])
        response = HttpResponse(text, content_type=CONTENT_TYPES[output])
        response["Content-Disposition"] = f'attachment; filename="tickets-{project.slug}.{output}"'
        return response


class TicketPushApi(ProjectApi):
    """Push the tickets to the project's issue tracker (in the background): an issue per ticket, updated when the
    ticket changes, closed when it is fixed. The outcome is on GET /api/v1/tickets/tracker/ and on each ticket."""

    @extend_schema(operation_id="tickets_push", request=None,
                   responses={202: inline_serializer(name="TicketPushQueued", fields={
                       "queued": serializers.BooleanField(), "repository": serializers.CharField()}),
                       400: OpenApiResponse(description="no tracker connected, or it is disabled")})
    def post(self, request: Request) -> Response:
        connection = tickets_push_request(project=self.project(request))
        return Response({"queued": True, "repository": connection.repository}, status=status.HTTP_202_ACCEPTED)


class IssueTrackerOutputSerializer(serializers.Serializer):
    base_url = serializers.CharField()
    repository = serializers.CharField()
    token_hint = serializers.CharField(help_text="the token's last characters; the token is never shown")
    enabled = serializers.BooleanField()
    last_push_at = serializers.DateTimeField(allow_null=True)
    last_push_summary = serializers.DictField()
    last_error = serializers.CharField(help_text="the tracker's HTTP status and a fixed reason, never its own words")
    last_error_at = serializers.DateTimeField(allow_null=True)


class IssueTrackerDetailApi(ProjectApi):
    """The project's issue tracker connection and how its last push went."""

    @extend_schema(operation_id="tickets_tracker_retrieve", responses=IssueTrackerOutputSerializer)
    def get(self, request: Request) -> Response:
        return Response(IssueTrackerOutputSerializer(issue_tracker_get(project=self.project(request))).data)


class IssueTrackerSetApi(ProjectApi):
    """Connect a GitHub-compatible issues API (or change the connection; without a token the stored one stays)."""

    class InputSerializer(serializers.Serializer):
        base_url = serializers.CharField(required=False, default="https://api.github.com", max_length=500)
        repository = serializers.CharField(max_length=300, help_text="owner/name")
        token = serializers.CharField(required=False, default=None, max_length=500, write_only=True)
        enabled = serializers.BooleanField(required=False, default=True)

    @extend_schema(operation_id="tickets_tracker_update", request=InputSerializer,
                   responses=IssueTrackerOutputSerializer)
    def put(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        connection = issue_tracker_connect(project=self.project(request), **data.validated_data)
        return Response(IssueTrackerOutputSerializer(connection).data)


class IssueTrackerDeleteApi(ProjectApi):
    """Disconnect the issue tracker (tickets keep their issue numbers)."""

    @extend_schema(operation_id="tickets_tracker_destroy", responses={204: None})
    def delete(self, request: Request) -> Response:
        issue_tracker_disconnect(project=self.project(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

