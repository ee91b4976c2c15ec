from django.urls import path

from clear.api.routing import api_route
from diagnosis.tickets import apis

app_name = "tickets"

urlpatterns = [
    # /api/v1/tickets/
    path("api/v1/tickets/", apis.TicketListApi.as_view(), name="ticket-list"),
    path("api/v1/tickets/export/", apis.TicketExportApi.as_view(), name="ticket-export"),
    path("api/v1/tickets/push/", apis.TicketPushApi.as_view(), name="ticket-push"),
    path("api/v1/tickets/tracker/",
         api_route(get=apis.IssueTrackerDetailApi, put=apis.IssueTrackerSetApi, delete=apis.IssueTrackerDeleteApi),
         name="ticket-tracker"),
    path("api/v1/tickets/<int:ticket_id>/", api_route(get=apis.TicketDetailApi, patch=apis.TicketUpdateApi),
         name="ticket-detail"),
]
