"""`python -m examples.support_desk.labels --out DIR [--seed N] [--bugs SPEC] [--release R] [--tasks IDS]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import BUG_NAMES, BugSwitches
from .export import export_run, write_labels


def _bugs(value: str) -> BugSwitches:
    try:
        return BugSwitches.parse(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.support_desk.labels",
        description="Run the desk and write one OTLP/JSON trace file per task plus labels.jsonl (where each "
        "active planted fault acted) into --out.",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the trace files and labels.jsonl")
    parser.add_argument("--seed", type=int, default=0, help="seed for timings and wording (default 0)")
    parser.add_argument("--bugs", type=_bugs, default=BugSwitches.all_on(),
                        help=f"comma-separated switches among {', '.join(BUG_NAMES)}, or 'all' (default) or 'none'")
    parser.add_argument("--release", default="dev", help="service.version written on every trace (default dev)")
    parser.add_argument("--tasks", default=None, help="comma-separated task ids (default: all)")
    args = parser.parse_args(argv)
    try:
        paths, rows = export_run(out=args.out, seed=args.seed, bugs=args.bugs, release=args.release,
                                 task_ids=args.tasks)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    labels = write_labels(folder=args.out, rows=rows)
    failed = sum(row["failed"] for row in rows)
    mistakes = sum(len(row["mistakes"]) for row in rows)
    print(f"{len(paths)} trace files and {labels}: {failed} failed, {mistakes} mistake(s) labelled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
