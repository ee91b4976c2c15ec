"""Start a diagnosis run from the command line, optionally wait for it (or run it in this process) and summarise."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.models import DiagnosisRun
from diagnosis.selectors import diagnosis_run_get, diagnosis_run_summary
from diagnosis.services import diagnosis_run_execute, diagnosis_run_retry_errors, diagnosis_run_start

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_QUEUED_HINT_SECONDS = 15


def parse_when(value: str | None) -> datetime | None:
    """ISO 8601 (a date means its midnight UTC; naive times are UTC) or an age such as 30m, 6h, 7d."""
    if not value:
        return None
    match = _RELATIVE.match(value.strip())
    if match:
        return timezone.now() - timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    parsed = parse_datetime(value.strip())
    if parsed is None:
        day = parse_date(value.strip())
        parsed = datetime(day.year, day.month, day.day) if day else None
    if parsed is None:
        raise CommandError(f"Cannot read the time {value!r}: use ISO 8601 (2025-01-06T09:00Z, 2025-01-06) or an "
                           "age such as 30m, 6h, 7d.")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt_timezone.utc)


def _csv(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


class Command(BaseCommand):
    help = ("Diagnose a project's traces: choose them (release, time window, tags, outcome, node, ids, sample), run "
            "the judges, and with --wait or --inline print progress and a summary.")

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")
        parser.add_argument("--release", default="")
        parser.add_argument("--since", help="ISO time or an age (30m, 6h, 7d): traces that started at or after it")
        parser.add_argument("--until", help="ISO time or an age: traces that started before it")
        parser.add_argument("--tags", help="comma-separated; a trace must carry all of them")
        parser.add_argument("--outcome", choices=["success", "failure"])
        parser.add_argument("--node", default="", help="only traces with a span of this node")
        parser.add_argument("--trace-ids", help="comma-separated trace ids")
        parser.add_argument("--judges", help="comma-separated: rules, rubrics, llm, rule.<name>, rubric.<id>, "
                                             "llm.step, llm.trace, contrastive (default: all rule judges and enabled "
                                             "rubrics, the LLM judges when a model is configured, and contrastive)")
        parser.add_argument("--model", default="", help="LiteLLM model for the LLM judges (default CLEAR_JUDGE_MODEL)")
        parser.add_argument("--rubrics", default="all", help='"all" enabled rubrics or comma-separated rubric ids')
        parser.add_argument("--sample-rate", type=float, default=1.0, help="0 < F <= 1, deterministic per trace id")
        parser.add_argument("--budget-tokens", type=int)
        parser.add_argument("--budget-cost", type=float)
        parser.add_argument("--concurrency", type=int, help="trace tasks in flight (default CLEAR_JUDGE_CONCURRENCY)")
        parser.add_argument("--name", default="")
        parser.add_argument("--wait", action="store_true", help="enqueue, then poll until the run finishes")
        parser.add_argument("--inline", action="store_true", help="judge in this process; no worker needed")
        parser.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
        parser.add_argument("--poll-seconds", type=float, default=1.0)
        parser.add_argument("--retry-errors", metavar="RUN_ID",
                            help="re-judge only the traces of this finished run whose judging errored (a model call "
                                 "failed or the trace's task crashed), with its judges, model, rubrics and budget")

    def handle(self, *args, **options):
        try:
            project = project_get_by_name(name=options["project"])
        except ClearError as exc:
            raise CommandError(f"{exc.message}. Create it with `manage.py create_project` or check the name.") from None
        rubric_ids: list[int] | str = "all"
        if options["rubrics"] != "all":
            try:
                rubric_ids = [int(i) for i in _csv(options["rubrics"])]
            except ValueError:
                raise CommandError('--rubrics takes "all" or comma-separated rubric ids') from None
        config = {"concurrency": options["concurrency"]} if options["concurrency"] else {}
        try:
            if options["retry_errors"]:
                earlier = diagnosis_run_get(project=project, run_id=options["retry_errors"])
                run = diagnosis_run_retry_errors(run=earlier, enqueue=not options["inline"])
            else:
                run = diagnosis_run_start(
                    project=project, release=options["release"], since=parse_when(options["since"]),
                    until=parse_when(options["until"]), tags=_csv(options["tags"]), outcome=options["outcome"] or "",
                    node=options["node"], trace_ids=_csv(options["trace_ids"]), judges=_csv(options["judges"]) or None,
                    model=options["model"], rubric_ids=rubric_ids, budget_tokens=options["budget_tokens"],
                    budget_cost=options["budget_cost"], sample_rate=options["sample_rate"], name=options["name"],
                    config=config, enqueue=not options["inline"],
                )
        except ClearError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Diagnosis run {run.pk}: {run.total_count} trace(s), judges {', '.join(run.judges)}")
        for warning in (run.config or {}).get("warnings", []):
            self.stderr.write(f"warning: {warning}")
        if options["inline"]:
            run = diagnosis_run_execute(run=run, progress=self._progress)
            self._end_progress()
            self._insights(run)
        elif options["wait"]:
            run = self._wait(run, timeout=options["timeout"], poll=max(0.1, options["poll_seconds"]))
        else:
            self.stdout.write("Queued; follow it with --wait next time, or see the diagnosis runs page.")
            return
        self._summary(run)
        if run.status == DiagnosisRun.Status.FAILED:
            raise CommandError(f"The run failed: {run.failure_message}")

    def _insights(self, run: DiagnosisRun) -> None:
        from diagnosis.management.commands.build_insights import write_summary
        from diagnosis.services.insights import insights_build

        summary = insights_build(run=run)  # None unless the run succeeded or ran out of budget
        if summary is not None:
            write_summary(self.stdout.write, project=run.project, run=run, summary=summary)

    def _wait(self, run: DiagnosisRun, *, timeout: float | None, poll: float) -> DiagnosisRun:
        started = time.monotonic()
        hinted = False
        while True:
            run.refresh_from_db()
            self._progress(run)
            if run.is_finished:
                self._end_progress()
                return run
            waited = time.monotonic() - started
            if not hinted and run.status == DiagnosisRun.Status.QUEUED and waited > _QUEUED_HINT_SECONDS:
                self.stderr.write("\nStill queued: is a Celery worker running? (Or use --inline.)")
                hinted = True
            if timeout is not None and waited > timeout:
                self._end_progress()
                raise CommandError(f"Run {run.pk} is still {run.status} after {timeout:g} s; it keeps going in the "
                                   "background.")
            time.sleep(poll)

    def _progress(self, run: DiagnosisRun) -> None:
        total = max(run.total_count, 1)
        finished = run.done_count + run.skipped_count
        width = 30
        filled = int(width * min(finished, total) / total)
        bar = "#" * filled + "." * (width - filled)
        line = (f"\r[{bar}] {finished}/{run.total_count} traces  {run.status}  "
                f"tokens {run.input_tokens + run.output_tokens}  ${run.cost:.4f}  errors {run.error_count}")
        self.stderr.write(line, ending="")
        self.stderr.flush()

    def _end_progress(self) -> None:
        self.stderr.write("")

    def _summary(self, run: DiagnosisRun) -> None:
        summary = diagnosis_run_summary(project=run.project, run=run)
        out = self.stdout.write
        out(f"Run {run.pk}: {run.status}")
        out(f"  traces judged: {summary.traces_judged} of {summary.traces_total}"
            + (f" ({summary.traces_skipped} skipped)" if summary.traces_skipped else ""))
        statuses = ", ".join(f"{status} {n}" for status, n in sorted(summary.feedback_by_status.items())) or "none"
        out(f"  feedback by status: {statuses}")
        out(f"  traces with a failing verdict: {summary.failing_traces}")
        if summary.failing_by_judge:
            out("  failing verdicts by judge:")
            for judge, count in summary.failing_by_judge.items():
                out(f"    {judge:<32} {count}")
        out(f"  tokens: {summary.input_tokens} in, {summary.output_tokens} out; cost ${summary.cost:.4f}")
        if summary.errors:
            out(f"  judge errors: {summary.errors}" + (f" ({summary.errors_label})" if summary.errors_label else ""))
            for group in summary.errors_by_cause:
                out(f"    {group['cause']:<24} {group['count']:>5}  e.g. {group['example'][:100]}")
            for judge in summary.judges_without_verdict:
                out(f"  {judge['label']}")
            out(f"  re-judge them: manage.py diagnose --project {run.project.slug!r} --retry-errors {run.pk}")
        if summary.dropped_evidence:
            out(f"  evidence quotes dropped (not found in the span): {summary.dropped_evidence}")
        report = summary.contrastive
        if report:
            findings = report.get("findings") or []
            out(f"  contrastive judge: {report.get('status')}"
                + (f" ({report['reason']})" if report.get("reason") else f", {len(findings)} finding(s)"))
            for finding in findings:
                out(f"    [{finding['node']}] {finding['statement']}")
