"""Score failure attributions against Who&When-style labels: agent accuracy, step accuracy (exact, ±1, ±3)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from diagnosis.attribution.baselines import AGENT_BASELINES, BASELINE_NAMES
from diagnosis.attribution.scoring import attribution_score, labels_read
from diagnosis.attribution.services import ALL_METHODS, OFFLINE_METHODS


class Command(BaseCommand):
    help = ("Compare a method's attributions with labels (JSONL: trace_id, mistake_agent, mistake_step), computing "
            "the missing attributions first; prints agent accuracy, step accuracy exact / ±1 / ±3 and the count (an "
            "unconfident answer by its top candidate), the same for the confident answers alone, and beside them the "
            "label-free baselines on the same traces.")

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project name or slug")
        parser.add_argument("--labels", required=True, help="labels.jsonl")
        parser.add_argument("--method", choices=ALL_METHODS, default="learned")
        parser.add_argument("--model", default="", help="LiteLLM model for the LLM methods (default CLEAR_JUDGE_MODEL)")
        parser.add_argument("--api-base", default="")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        try:
            project = project_get_by_name(name=options["project"])
        except ClearError as exc:
            raise CommandError(f"{exc.message}. Create it with `manage.py create_project` or check the name.") from None
        try:
            labels = labels_read(path=Path(options["labels"]))
            compute = {}
            if options["method"] not in OFFLINE_METHODS:
                compute = {"model": options["model"] or None, "api_base": options["api_base"] or None}
            report = attribution_score(project=project, labels=labels, method=options["method"], **compute)
        except ClearError as exc:
            raise CommandError(exc.message) from None
        summary = report.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        self.stdout.write(
            f"method {summary['method']}: agent accuracy {summary['agent_accuracy']:.2%}, step accuracy "
            f"{summary['step_accuracy']:.2%} (±1 {summary['step_within_1']:.2%}, ±3 {summary['step_within_3']:.2%}), "
            f"count {summary['count']}")
        confident = summary["confident"]
        self.stdout.write(
            f"confident answers: {confident['count']} of {summary['count']}: agent accuracy "
            f"{confident['agent_accuracy']:.2%}, step accuracy {confident['step_exact']:.2%} (±3 "
            f"{confident['step_within_3']:.2%}); baselines on those runs: " + ", ".join(
                f"{BASELINE_NAMES[name]} {rates['agent' if name in AGENT_BASELINES else 'step_exact']:.2%}"
                for name, rates in confident["baselines"].items()))
        for name, rates in summary["baselines"].items():
            what = (f"agent accuracy {rates['agent']:.2%}" if name in AGENT_BASELINES else
                    f"step accuracy {rates['step_exact']:.2%} (±1 {rates['step_within_1']:.2%}, "
                    f"±3 {rates['step_within_3']:.2%})")
            self.stdout.write(f"  baseline {BASELINE_NAMES[name]}: {what}")
        if report.errors or report.inconclusive or report.labels_without_trace:
            self.stdout.write(f"errors {report.errors}, inconclusive {report.inconclusive}, labels without a trace "
                              f"in the project {report.labels_without_trace}")
