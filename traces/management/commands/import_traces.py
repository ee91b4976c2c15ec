"""`manage.py import_traces PATH --project NAME [--outcome success|failure] [--json]`.

PATH is a file or a folder of OTLP/JSON requests (*.json), JSONL files (*.jsonl / *.ndjson: one OTLP/JSON request,
Langfuse ingestion event or Langfuse batch per line), optionally gzip-compressed. See traces/services/imports.py.
"""

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clear.errors import ClearError, NotFoundError
from clear.projects.models import Project
from clear.projects.selectors import project_get_by_name
from traces.services.import_summary import ImportSummary, notes_grouped, summary_as_dict
from traces.services.imports import OUTCOMES, traces_import

_BAR_WIDTH = 30


class ProgressBar:
    """A text bar on stderr: redrawn in place on a terminal, one line per 10% otherwise (logs, CI)."""

    def __init__(self, stream, *, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last = -1
        self._drawn = False

    def __call__(self, done: int, total: int, name: str) -> None:
        if not self.enabled:
            return
        percent = int(100 * done / total) if total else 100
        step = percent if self.tty else percent // 10 * 10
        if step == self._last:
            return
        self._last = step
        filled = _BAR_WIDTH * percent // 100
        bar = f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {percent:3d}%  {name[-50:]}"
        if self.tty:
            self.stream.write(f"\r{bar:<100}")
        else:
            self.stream.write(bar + "\n")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


class Command(BaseCommand):
    help = (
        "Import traces from a file or a folder: OTLP/JSON requests (*.json), JSONL (one OTLP/JSON request, Langfuse "
        "ingestion event or Langfuse batch per line), optionally .gz. Idempotent: re-importing stores nothing twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="a file, or a folder walked recursively for *.json / *.jsonl / *.ndjson")
        parser.add_argument("--project", required=True, help="name (or slug) of the project to import into")
        parser.add_argument(
            "--outcome", choices=OUTCOMES,
            help="outcome for imported traces that carry none (never overrides the trace's own clear.outcome)",
        )
        parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args, path: str, project: str, outcome: str | None, json: bool, no_progress: bool,
               **options) -> None:
        target = project_or_command_error(project)
        source = Path(path).expanduser()
        if not source.exists():
            raise CommandError(
                f"{source} does not exist: pass a file or a folder of OTLP/JSON requests (*.json) or JSONL (*.jsonl)."
            )
        stream = self.stderr._out if hasattr(self.stderr, "_out") else sys.stderr
        bar = ProgressBar(stream, enabled=not no_progress)
        try:
            summary = traces_import(project=target, path=source, outcome=outcome, progress=bar)
        except ClearError as exc:
            raise CommandError(exc.message) from exc
        finally:
            bar.close()
        if json:
            self.stdout.write(_dumps(summary_as_dict(summary)))
        else:
            self._print(summary, project=target)
        if summary.requests_accepted == 0 and summary.requests_refused:
            raise CommandError(
                f"Nothing imported from {source}: all {summary.requests_refused} requests were refused (see above)."
            )

    def _print(self, summary: ImportSummary, *, project: Project) -> None:
        out = self.stdout.write
        out(f"Imported {summary.path} into project {project.name!r}:")
        skipped = ""
        if summary.skipped_files:
            names = ", ".join(summary.skipped_files[:5]) + (" ..." if len(summary.skipped_files) > 5 else "")
            skipped = f", {len(summary.skipped_files)} skipped (not .json/.jsonl/.ndjson: {names})"
        out(f"  files:    {len(summary.files)} read{skipped}")
        out(f"  requests: {summary.requests_accepted} accepted, {summary.requests_refused} refused")
        out(f"  traces:   {summary.traces_touched} ({summary.traces_created} new, "
            f"{summary.traces_already_present} already present)")
        out(f"  spans:    {summary.spans_received} ({summary.spans_created} new, "
            f"{summary.spans_already_present} already present, {summary.spans_rejected} rejected for bad ids)")
        if summary.scores or summary.langfuse_events_refused:
            out(f"  langfuse: {summary.scores} scores, {summary.langfuse_events_refused} events refused")
        if summary.outcome:
            out(f"  outcome:  {summary.outcome!r} set on {summary.outcome_set} traces that carried none")
        if summary.refused:
            out("Refused:")
            for where, reason in notes_grouped(summary.refused):
                out(f"  {where}: {reason}")
        if summary.warnings:
            out("Accepted with problems:")
            for where, reason in notes_grouped(summary.warnings):
                out(f"  {where}: {reason}")


def project_or_command_error(name: str) -> Project:
    try:
        return project_get_by_name(name=name)
    except NotFoundError:
        known = list(Project.objects.order_by("name").values_list("name", flat=True)[:10])
        hint = f" Existing projects: {', '.join(repr(k) for k in known)}." if known else " There is no project yet."
        raise CommandError(
            f"No project named {name!r}: pass an existing project's name or slug to --project, or create it with "
            f"`manage.py create_project {name!r}`.{hint}"
        ) from None


def _dumps(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
