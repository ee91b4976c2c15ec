from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "diagnosis.tickets"
    label = "tickets"
    verbose_name = "Tickets"
