from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Migrate the guard table (the throttles' counters and the dashboard cache without Redis) where the settings "
        "put it: on SQLite its own file beside the database, which `migrate` leaves alone; on Postgres the database "
        "itself, where `migrate` already made it."
    )

    def handle(self, *args, **options) -> None:
        call_command("migrate", "guards", database=settings.CLEAR_GUARDS_DATABASE, interactive=False,
                     verbosity=options["verbosity"])
