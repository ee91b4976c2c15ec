"""Build (or rebuild) a project's insights from a finished diagnosis run, in this process."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.models import DiagnosisRun
from diagnosis.selectors import diagnosis_run_get, insight_list
from diagnosis.services.insights import insights_build


class Command(BaseCommand):
    help = ("Cluster the judges' feedback of a finished diagnosis run into node-level and system-level insights "
            "(default: the project's latest finished run). Matched insights keep their ids across runs.")

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")
        parser.add_argument("--run", help="diagnosis run id (default: the latest succeeded or budget_exhausted run)")
        parser.add_argument("--force", action="store_true",
                            help="rebuild a run whose insights were built already (or whose build failed)")

    def handle(self, *args, **options):
        try:
            project = project_get_by_name(name=options["project"])
            if options["run"]:
                run = diagnosis_run_get(project=project, run_id=options["run"])
            else:
                finished = (DiagnosisRun.Status.SUCCEEDED, DiagnosisRun.Status.BUDGET_EXHAUSTED)
                run = DiagnosisRun.objects.filter(project=project, status__in=finished).order_by("-created_at").first()
                if run is None:
                    raise CommandError("The project has no finished diagnosis run; run `manage.py diagnose` first.")
        except ClearError as exc:
            raise CommandError(exc.message) from None
        if not run.is_finished or run.status not in (DiagnosisRun.Status.SUCCEEDED,
                                                     DiagnosisRun.Status.BUDGET_EXHAUSTED):
            raise CommandError(f"Run {run.pk} is {run.status}: insights are built from succeeded or "
                               "budget_exhausted runs.")
        summary = insights_build(run=run, force=options["force"])
        if summary is None:
            run.refresh_from_db()
            raise CommandError(f"Run {run.pk} insights are {run.insights_status or 'not built'}; pass --force to "
                               "rebuild them.")
        write_summary(self.stdout.write, project=project, run=run, summary=summary)


def write_summary(out, *, project, run, summary: dict) -> None:
    out(f"Insights of run {run.pk}: {summary['statements']} statement(s) from {summary['judged']} judged trace(s); "
        f"{summary['new']} new, {summary['matched']} matched, {summary['reopened']} reopened; "
        f"{summary['other_statements']} statement(s) in no cluster ({summary['seconds']} s)")
    for insight in insight_list(project=project, run=run, include_other=False)[:50]:
        where = insight.node or "system"
        out(f"  #{insight.pk:<5} {insight.level:<6} {where[:20]:<20} {insight.severity:<8} "
            f"{insight.trace_count:>4} traces {insight.frequency:6.1%}  {insight.title[:70]}")
