"""`manage.py span_partitions [--ensure] [--convert] [--json]`: the span table's daily partitions on Postgres."""

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from traces.selectors.retention import span_partitions_expired
from traces.services import partitions


class Command(BaseCommand):
    help = ("List the span table's daily partitions (Postgres) and the rows waiting in the default partition. "
            "--ensure creates the coming days' partitions now (beat does it every hour); --convert partitions a "
            "plain span table, in batches (migration 0008 does it; run it with ingestion stopped).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--ensure", action="store_true", help="create today's and the coming days' partitions")
        parser.add_argument("--days-ahead", type=int, default=None,
                            help="days ahead to create (default CLEAR_SPAN_PARTITIONS_AHEAD)")
        parser.add_argument("--convert", action="store_true", help="convert a plain span table, batch by batch")
        parser.add_argument("--batch", type=int, default=50_000, help="rows per batch of --convert")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options) -> None:
        report: dict = {"partitioned": partitions.span_table_is_partitioned()}
        if options["convert"]:
            report["converted"] = partitions.span_table_partition(batch_size=options["batch"])
            report["partitioned"] = partitions.span_table_is_partitioned()
        if options["ensure"]:
            ahead = options["days_ahead"] if options["days_ahead"] is not None else settings.CLEAR_SPAN_PARTITIONS_AHEAD
            report["created"] = [d.isoformat() for d in partitions.span_partitions_ensure(days_ahead=ahead)]
        report["days"] = [d.isoformat() for d in partitions.span_partition_days()]
        report["default_rows"] = partitions.span_default_rows()
        report["expired_days"] = [d.isoformat() for d in span_partitions_expired()]
        if options["json"]:
            self.stdout.write(json.dumps(report))
            return
        if not report["partitioned"]:
            self.stdout.write("The span table is not partitioned (SQLite keeps one plain table).")
            return
        if "converted" in report:
            c = report["converted"]
            self.stdout.write(f"converted {c['rows']} rows in {c['seconds']} s ({c['rows_per_second']} rows/s)")
        if report.get("created"):
            self.stdout.write("created: " + ", ".join(report["created"]))
        days = report["days"]
        self.stdout.write(f"{len(days)} daily partition(s)" + (f", {days[0]} to {days[-1]}" if days else "") + ":")
        for day in days:
            self.stdout.write(f"  {partitions.partition_name(partitions.date.fromisoformat(day))}")
        self.stdout.write(f"default partition: {report['default_rows']} row(s) (days with no partition of their own)")
        if report["expired_days"]:
            self.stdout.write("past every project's retention (the next enforce_retention drops them): "
                              + ", ".join(report["expired_days"]))
