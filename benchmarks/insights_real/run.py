"""Insights on real agents' traces, no model: issue 28's coverage of labelled faults and issue 41's two figures,
coverage and ticket precision "within one agent turn" (turns.py), on tau-airline, Who&When and the example agent.

    .venv/bin/python -m benchmarks.insights_real --dataset tau-airline                      # 4 runs per task
    .venv/bin/python -m benchmarks.insights_real --dataset tau-airline --runs-per-task 1    # 5 samplings
    .venv/bin/python -m benchmarks.insights_real --dataset all --runs-per-task both         # the README's table
    .venv/bin/python -m benchmarks.insights_real --dataset whowhen --json var/bench/ir.json
    .venv/bin/python -m benchmarks.insights_real --dataset tau-airline --format anthropic   # as another SDK records it

One process on a throw-away Postgres database (`--db`, dropped and recreated, dropped at the end unless
`--keep-db`), clear.settings.test (Celery eager, nothing queued), CLEAR_JUDGE_MODEL="" (no model: offline names).
Each measured set of runs is its own project (build.py): the trace files are imported through traces_import (links
in a temporary folder, so labels.jsonl never reaches the importer), one diagnosis run with the default judges
(every rule judge, the rubrics, the contrastive judge) runs in-process, then insights_build (which syncs the
tickets). Only the scoring reads labels (score_tau.py, labelled.py). `--runs-per-task 1` measures `--samples`
sets (seeds 0, 1, …), each holding one run drawn per task (`clear.task.id` of the root span), and prints the mean
and spread of the figures; `all` measures every run; `both` does both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.insights_real import build, labelled, report, score_tau, turns  # noqa: E402
from benchmarks.insights_real.formats import FORMATS  # noqa: E402
from benchmarks.throwaway import bench_in_throwaway, dataset_folder, django_start  # noqa: E402

DATASETS = {
    "tau-airline": ("tau-airline", "airline-*.json"),
    "whowhen": ("whowhen-algorithm-generated", "Algorithm-Generated-*.json"),
    "example": (None, "support-desk-*.json"),
}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=[*sorted(DATASETS), "all"], default="tau-airline")
    p.add_argument("--runs-per-task", choices=["1", "all", "both"], default="all",
                   help="1: --samples samplings of one run per task; all: every run; both")
    p.add_argument("--samples", type=int, default=5, help="samplings of one run per task (seeds 0..N-1)")
    p.add_argument("--prefer", choices=["any", "succeeding"], default="any",
                   help="one run per task: draw among all of a task's runs, or among its succeeding ones when it "
                        "has one (clear.outcome; tau-airline: 14 of 50 runs fail, about a quarter)")
    p.add_argument("--pg", default=os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
                   help="Postgres server URL without database (default postgres://postgres@127.0.0.1:5432)")
    p.add_argument("--db", default="clear_bench_insights_real", help="benchmark database, dropped and recreated")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="test Redis URL (nothing is queued)")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--detail", action="store_true", help="also list every insight of each sampling")
    p.add_argument("--tune-only", action="store_true",
                   help="tau-airline: score the tune split only (while choosing settings, the report split's labels "
                        "stay unread)")
    p.add_argument("--format", dest="fmt", choices=["as-recorded", *FORMATS], default="as-recorded",
                   help="tau-airline: import the runs re-encoded as another instrumentation records them "
                        "(formats.py); the figures must not change")
    p.add_argument("--json", dest="json_out", metavar="FILE", help="also write the results as JSON to this file")
    args = p.parse_args(argv)
    if args.fmt != "as-recorded" and args.dataset != "tau-airline":
        p.error(f"--format {args.fmt}: only tau-airline is recorded as OpenInference, the shape formats.py "
                "re-encodes; add --dataset tau-airline")
    return args


def _log(msg: str) -> None:
    print(f"[insights_real] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _git_state() -> dict:
    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"head": git("log", "-1", "--format=%h %cI %s"), "status_short": git("status", "--short").splitlines()}


def _machine() -> dict:
    return {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()]}


def _folder(dataset: str, tmp: Path) -> tuple[Path | None, str]:
    if dataset == "example":
        return labelled.example_agent_dataset(directory=tmp)
    return dataset_folder(DATASETS[dataset][0]), ""


def _labelled(*, dataset: str, project, folder: Path, tune_only: bool) -> tuple[list[turns.Labelled], tuple[str, ...]]:
    if dataset == "tau-airline":
        splits = ("tune",) if tune_only else ("report", "tune")
        return score_tau.tau_labelled(project=project, folder=folder, splits=splits), splits
    return labelled.jsonl_labelled(project=project, labels_file=folder / "labels.jsonl"), ("all",)


def measure(*, dataset: str, name: str, files: list[Path], folder: Path, detail: bool, tune_only: bool,
            fmt: str = "") -> dict:
    """One project: import `files`, diagnose, build, score."""
    from clear.projects.services import project_create, user_get_or_create
    from diagnosis.tickets.models import Ticket

    owner, _ = user_get_or_create(email="bench@example.com", password="correct horse battery staple")
    project = project_create(name=f"insights real {name}", owner=owner)
    _log(f"{name}: import {len(files)} files, diagnose (default judges, no model), build")
    result = {"name": name, "dataset": dataset, "format": fmt or "as-recorded",
              "ingest": build.import_files(project=project, files=files, fmt=fmt)}
    run, summary, result["timing"] = build.diagnose(project=project)
    result["run"] = build.run_summary(run=run, summary=summary)
    rows, statements = build.insights_read(project=project, run=run)
    result["open_list"] = build.open_list(project=project)
    result["tickets"] = dict(Counter(Ticket.objects.filter(project=project).values_list("status", flat=True)))
    runs, splits = _labelled(dataset=dataset, project=project, folder=folder, tune_only=tune_only)
    result["figures"] = turns.score(rows=rows, statements=statements, spans=build.spans_read(project=project),
                                    labelled=runs, splits=splits)
    result["insights"] = rows
    if dataset == "tau-airline" and detail and not tune_only:
        # Issue 28's definition, beside issue 41's, on the sets listed in full.
        result["score"] = score_tau.score_tau(project=project, rows=rows, statements=statements, folder=folder)
        report.print_tau_detail(result)
    elif detail:
        report.print_whowhen_detail(result)
    else:
        report._print_header(result)
    report.print_figures(result)
    if not detail:
        result.pop("insights")  # the samplings keep their figures; their insight listings would swamp the JSON
    return result


def bench(args: argparse.Namespace, top: dict) -> dict:
    datasets = sorted(DATASETS) if args.dataset == "all" else [args.dataset]
    fmt = "" if args.fmt == "as-recorded" else args.fmt
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="clear-bench-example-") as tmp:
        for dataset in datasets:
            folder, why = _folder(dataset, Path(tmp))
            if folder is None:
                _log(f"{dataset}: not measured: {why}")
                out[dataset] = {"not_measured": why}
                continue
            files = sorted(folder.glob(DATASETS[dataset][1]))
            entry: dict = {"files": len(files)}
            if args.runs_per_task in ("all", "both"):
                entry["all_runs"] = measure(dataset=dataset, name=f"{dataset}, every run", files=files,
                                            folder=folder, detail=True, tune_only=args.tune_only, fmt=fmt)
            if args.runs_per_task in ("1", "both"):
                samples = []
                suffix = " (succeeding first)" if args.prefer == "succeeding" else ""
                for seed in range(args.samples):
                    chosen = build.sample_one_per_task(files=files, seed=seed, prefer=args.prefer)
                    if len(chosen) == len(files):
                        # One run per task already (Who&When): every sampling is the whole set, measured once.
                        samples.append(entry.get("all_runs") or measure(
                            dataset=dataset, name=f"{dataset}, one run per task (every run)", files=chosen,
                            folder=folder, detail=args.detail, tune_only=args.tune_only, fmt=fmt))
                        break
                    samples.append(measure(dataset=dataset, name=f"{dataset}, one run per task{suffix}, seed {seed}",
                                           files=chosen, folder=folder, detail=args.detail,
                                           tune_only=args.tune_only, fmt=fmt))
                entry["one_per_task"] = {"samples": samples, "summary": report.aggregate(samples)}
                report.print_aggregate(f"{dataset}, one run per task{suffix} ({len(samples)} samplings)",
                                       entry["one_per_task"]["summary"])
            out[dataset] = entry
    top["datasets"] = out
    return top


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    top = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": _machine(), "git": _git_state(),
           "command": "python -m benchmarks.insights_real " + shlex.join(sys.argv[1:] if argv is None else argv)}
    report.print_top(top)
    _log(f"database {args.db}: recreate and migrate")
    result = bench_in_throwaway(pg=args.pg, db=args.db, keep=args.keep_db,
                                setup=lambda: django_start(pg=args.pg, db=args.db, redis=args.redis),
                                bench=lambda: bench(args, top))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
