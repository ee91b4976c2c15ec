"""Attribute a project's failed traces: which node made the decisive mistake, at which step."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.attribution.selectors import row_confident
from diagnosis.attribution.services import ALL_METHODS, attribution_compute_for_project


class Command(BaseCommand):
    help = ("Attribute every failed trace of a project (Who&When's question: which node, which step) with the learned "
            "method (default; offline, chosen by nested cross-validation), the offline heuristic or an LLM method; "
            "each answer carries its confidence. Traces already attributed by the method are kept unless --recompute.")

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")
        parser.add_argument("--method", choices=ALL_METHODS, default="learned")
        parser.add_argument("--model", default="", help="LiteLLM model for the LLM methods (default CLEAR_JUDGE_MODEL)")
        parser.add_argument("--api-base", default="")
        parser.add_argument("--trace-ids", help="comma-separated trace ids")
        parser.add_argument("--recompute", action="store_true")
        parser.add_argument("--json", action="store_true", help="print one JSON object per attribution")

    def handle(self, *args, **options):
        try:
            project = project_get_by_name(name=options["project"])
        except ClearError as exc:
            raise CommandError(f"{exc.message}. Create it with `manage.py create_project` or check the name.") from None
        trace_ids = [t.strip() for t in (options["trace_ids"] or "").split(",") if t.strip()] or None
        try:
            batch = attribution_compute_for_project(
                project=project, method=options["method"], model=options["model"] or None,
                api_base=options["api_base"] or None, trace_ids=trace_ids, recompute=options["recompute"])
        except ClearError as exc:
            raise CommandError(exc.message) from None
        for a in batch.attributions:
            if options["json"]:
                self.stdout.write(json.dumps({
                    "trace_id": a.trace.trace_id, "method": a.method, "status": a.status, "agent": a.agent,
                    "step": a.step_index, "span_id": a.span_id, "confidence": a.confidence, "reason": a.reason,
                    "error": a.error, "confident": row_confident(status=a.status, details=a.details),
                    "candidates": (a.details or {}).get("candidates") or []}))
            else:
                where = f"{a.agent} @ step {a.step_index} ({a.span_id})" if a.status == "ok" else a.status
                sure = "" if a.confidence is None else f"  confidence {a.confidence:.2f}"
                if not row_confident(status=a.status, details=a.details) and (a.details or {}).get("candidates"):
                    where = "no confident answer; candidates " + ", ".join(
                        f"{c.get('agent')} ({c.get('share') or 0:.2f})" for c in a.details["candidates"][:3])
                self.stdout.write(f"{a.trace.trace_id}  {where}{sure}  {a.reason or a.error}")
        self.stderr.write(f"{batch.method}: {batch.computed} computed, {batch.already_present} already present, "
                          f"{batch.errors} errors")
