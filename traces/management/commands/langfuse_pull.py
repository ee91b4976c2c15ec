"""`manage.py langfuse_pull --project NAME --host URL --public-key K --secret-key S --from T [--to T]`.

Pulls traces, observations and scores of the time window from a Langfuse public API and stores them as if they had
been pushed to /api/public/ingestion. See traces/services/langfuse_pull.py.
"""

import json
import os
from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clear.errors import ClearError
from traces.management.commands.import_traces import project_or_command_error
from traces.services.langfuse_client import DEFAULT_RETRIES, DEFAULT_TIMEOUT, PullSummary
from traces.services.langfuse_pull import DEFAULT_PAGE_SIZE, langfuse_pull, parse_time


class Command(BaseCommand):
    help = (
        "Pull traces, observations and scores from an existing Langfuse (public API, Basic auth) for a time window "
        "into a project. Idempotent: pulling the same window again stores nothing twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="name (or slug) of the Clear project to store into")
        parser.add_argument("--host", default=os.environ.get("LANGFUSE_HOST"),
                            help="Langfuse base URL, e.g. https://cloud.langfuse.com (default: $LANGFUSE_HOST)")
        parser.add_argument("--public-key", default=os.environ.get("LANGFUSE_PUBLIC_KEY"),
                            help="pk-lf-... (default: $LANGFUSE_PUBLIC_KEY)")
        parser.add_argument("--secret-key", default=os.environ.get("LANGFUSE_SECRET_KEY"),
                            help="sk-lf-... (default: $LANGFUSE_SECRET_KEY)")
        parser.add_argument("--from", dest="from_time", required=True,
                            help="start of the window, ISO-8601 (2025-01-01 or 2025-01-01T00:00:00Z; naive = UTC)")
        parser.add_argument("--to", dest="to_time", help="end of the window, exclusive (default: now)")
        parser.add_argument("--page-size", type=int, default=DEFAULT_PAGE_SIZE, help="items per request (max 1000)")
        parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request")
        parser.add_argument("--retries", type=int, default=DEFAULT_RETRIES, help="retries on 429 / 5xx answers")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")

    def handle(self, *args, project: str, host: str | None, public_key: str | None, secret_key: str | None,
               from_time: str, to_time: str | None, page_size: int, timeout: float, retries: int, json: bool,
               **options) -> None:
        missing = [flag for flag, value in (("--host", host), ("--public-key", public_key),
                                            ("--secret-key", secret_key)) if not value]
        if missing:
            raise CommandError(f"Missing {', '.join(missing)} (or the LANGFUSE_HOST / LANGFUSE_PUBLIC_KEY / "
                               "LANGFUSE_SECRET_KEY environment variables).")
        target = project_or_command_error(project)
        self._progress_drawn = False
        try:
            start = parse_time(value=from_time)
            end = parse_time(value=to_time) if to_time else datetime.now(timezone.utc)
            summary = langfuse_pull(
                project=target, host=host, public_key=public_key, secret_key=secret_key, from_time=start,
                to_time=end, page_size=page_size, timeout=timeout, retries=retries, progress=self._progress,
            )
        except ClearError as exc:
            raise CommandError(exc.message) from exc
        finally:
            if self._progress_drawn:
                self.stderr.write("")
        if json:
            self.stdout.write(_dumps(_as_dict(summary)))
            return
        out = self.stdout.write
        out(f"Pulled {summary.host} [{summary.window[0]} .. {summary.window[1]}) into project {target.name!r}:")
        out(f"  traces:       {summary.traces}")
        out(f"  observations: {summary.observations} (observations API {summary.observations_api})")
        skipped = f", {summary.scores_skipped} skipped (no trace, or trace outside the window)" \
            if summary.scores_skipped else ""
        out(f"  scores:       {summary.scores}{skipped}")
        out(f"  stored:       {summary.spans_created} new spans, {summary.spans_already_present} already present; "
            f"{summary.traces_touched} traces ({summary.traces_created} new) finalised")
        if summary.events_refused:
            out(f"Refused ({len(summary.events_refused)}):")
            for line in summary.events_refused[:50]:
                out(f"  {line}")
            if len(summary.events_refused) > 50:
                out(f"  ... and {len(summary.events_refused) - 50} more")

    def _progress(self, what: str, count: int) -> None:
        self._progress_drawn = True
        self.stderr._out.write(f"\rpulling {what}: {count}   ")
        self.stderr._out.flush()


def _as_dict(summary: PullSummary) -> dict:
    return {
        "host": summary.host,
        "from": summary.window[0],
        "to": summary.window[1],
        "traces": summary.traces,
        "observations": summary.observations,
        "scores": summary.scores,
        "scores_skipped": summary.scores_skipped,
        "events_refused": summary.events_refused,
        "spans_created": summary.spans_created,
        "spans_already_present": summary.spans_already_present,
        "traces_touched": summary.traces_touched,
        "traces_created": summary.traces_created,
        "observations_api": summary.observations_api,
        "scores_api": summary.scores_api,
        "requests": summary.requests,
        "retries": summary.retries,
    }


def _dumps(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
