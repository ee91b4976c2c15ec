"""Command line: `list`, `run` (the suite, optionally exported over OTLP/HTTP), `run-task`, `health`, `serve` and
`make-target-repo` (the desk as a standalone repository for Clear's evolution pipeline)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExporter

from .config import BUG_NAMES, BugSwitches
from .suite import SuiteReport, execute_suite
from .tasks import TASKS, get_task
from .telemetry import otlp_http_exporter

PROG = "python -m examples.support_desk"
# A task no fault touches: `health` passes whenever the desk imports and runs end to end.
CANARY_TASK = "order-status-shipped"


def _bugs(value: str) -> BugSwitches:
    try:
        return BugSwitches.parse(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed for timings and wording (default 0)")
    parser.add_argument(
        "--bugs",
        type=_bugs,
        default=BugSwitches.all_on(),
        help=f"comma-separated switches among {', '.join(BUG_NAMES)}, or 'all' (default) or 'none'",
    )
    parser.add_argument("--release", default="dev", help="service.version written on every trace (default dev)")
    parser.add_argument("--endpoint", help="Clear (or any OTLP/HTTP) base URL; spans go to <URL>/v1/traces")
    parser.add_argument("--key", help="API key, sent as 'Authorization: Bearer <key>'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Deterministic multi-agent support desk.")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("list", help="list the tasks of the suite")

    run = commands.add_parser("run", help="run the suite and print a score per task")
    _add_common(run)
    run.add_argument("--tasks", default=None, help="comma-separated task ids (default: all)")

    run_task = commands.add_parser("run-task", help="run one task and write its result as JSON")
    _add_common(run_task)
    run_task.add_argument("--task", required=True, help="task id, as in clear.task.id")
    run_task.add_argument("--out", type=Path, help="where to write the JSON result (default: stdout)")

    commands.add_parser("health", help=f"exit 0 when the desk imports and the canary task {CANARY_TASK} passes")

    serve = commands.add_parser(
        "serve", help="run as a long-lived service (what a hot-swap activator starts): check health once, exit 1 if "
        "unhealthy, then touch a heartbeat file every --interval seconds until SIGTERM"
    )
    serve.add_argument("--heartbeat", type=Path, default=Path("heartbeat"), help="heartbeat file (default ./heartbeat)")
    serve.add_argument("--interval", type=float, default=1.0, help="seconds between heartbeats (default 1)")

    make_target = commands.add_parser(
        "make-target-repo", help="write the desk as a standalone git repository for Clear's evolution pipeline"
    )
    make_target.add_argument("dest", type=Path, help="directory to create (must not exist or be empty)")
    make_target.add_argument(
        "--bugs",
        default=None,
        help="faults built into the repository's code: a comma-separated list, 'all' or 'none' "
        "(default mediator_race,retry_loop)",
    )
    return parser


def _health() -> int:
    result = execute_suite(task_ids=[CANARY_TASK]).results[0]
    if result.outcome != "success":
        print(f"unhealthy: canary task {CANARY_TASK} failed: {'; '.join(result.failed_checks)}", file=sys.stderr)
        return 1
    print(f"healthy: canary task {CANARY_TASK} passed")
    return 0


def _serve(args: argparse.Namespace) -> int:
    if _health() != 0:
        return 1
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    args.heartbeat.parent.mkdir(parents=True, exist_ok=True)
    while not stopping:
        # Written whole then renamed, so a reader never sees an empty heartbeat.
        partial = args.heartbeat.with_name(args.heartbeat.name + ".tmp")
        partial.write_text(f"{os.getpid()} {time.time():.3f}\n", encoding="utf-8")
        os.replace(partial, args.heartbeat)
        time.sleep(args.interval)
    return 0


def _make_target_repo(args: argparse.Namespace) -> int:
    from .target_repo import TargetRepoError, target_repo_make

    try:
        commit = target_repo_make(dest=args.dest, bugs=args.bugs)
    except (TargetRepoError, ValueError) as error:
        print(f"make-target-repo: {error}", file=sys.stderr)
        return 2
    print(f"{args.dest}: branch main at {commit}")
    return 0


def _print_report(report: SuiteReport, *, release: str, seed: int, bugs: BugSwitches) -> None:
    width = max(len(result.task_id) for result in report.results) if report.results else 10
    print(f"support-desk release={release} seed={seed} switches={bugs.describe()}")
    for result in report.results:
        print(f"  {result.task_id:<{width}}  {result.score:.2f}  {result.outcome}")
    print(f"total: {report.passed}/{len(report.results)} passed, mean score {report.mean_score:.3f}")


def _export_target(args: argparse.Namespace) -> SpanExporter | None:
    if not args.endpoint:
        return None
    return otlp_http_exporter(args.endpoint, args.key)


def _report_export(report: SuiteReport, endpoint: str | None) -> int:
    if endpoint is None:
        return 0
    if report.failed_spans:
        print(f"export failed for {report.failed_spans} span(s) to {endpoint}", file=sys.stderr)
        return 1
    print(f"exported {report.exported_spans} spans to {endpoint.rstrip('/')}/v1/traces")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        for task in TASKS:
            print(f"{task.task_id:<26} {task.category:<15} {task.ticket}")
        return 0
    if args.command == "health":
        return _health()
    if args.command == "serve":
        return _serve(args)
    if args.command == "make-target-repo":
        return _make_target_repo(args)

    exporter = _export_target(args)
    try:
        if args.command == "run":
            report = execute_suite(
                release=args.release, bugs=args.bugs, seed=args.seed, exporter=exporter, task_ids=args.tasks
            )
            _print_report(report, release=args.release, seed=args.seed, bugs=args.bugs)
            return _report_export(report, args.endpoint)

        get_task(args.task)
        report = execute_suite(
            release=args.release, bugs=args.bugs, seed=args.seed, exporter=exporter, task_ids=[args.task]
        )
        result = report.results[0]
        document = json.dumps(result.as_json_dict(), indent=2, ensure_ascii=False) + "\n"
        if args.out is None:
            sys.stdout.write(document)
        else:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(document, encoding="utf-8")
            print(f"{result.task_id} seed={result.seed} score={result.score:.2f} {result.outcome} -> {args.out}")
        return _report_export(report, args.endpoint)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    finally:
        if exporter is not None:
            exporter.shutdown()
