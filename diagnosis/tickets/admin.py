from django.contrib import admin

from .models import IssueTrackerConnection, Ticket


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "project", "status", "node", "severity", "external_number", "updated_at")
    list_filter = ("status", "level", "severity")
    raw_id_fields = ("insight", "merged_into")
    search_fields = ("title", "fingerprint")


@admin.register(IssueTrackerConnection)
class IssueTrackerConnectionAdmin(admin.ModelAdmin):
    list_display = ("project", "repository", "base_url", "enabled", "last_push_at", "last_error")
    exclude = ("token",)  # set through the API or `manage.py connect_issue_tracker`; never shown
