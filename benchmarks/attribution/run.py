"""Failure attribution that generalises (issue 29): the learned method under nested cross-validation by task,
beside the label-free baselines, on Who&When Algorithm-Generated and on tau-airline.

    .venv/bin/python -m benchmarks.attribution --dataset whowhen          # ~1 min
    .venv/bin/python -m benchmarks.attribution --dataset tau-airline
    .venv/bin/python -m benchmarks.attribution --leave-one-dataset-out --write-model   # the shipped model (loo.py)

Each dataset's trace files (never its labels file) go into a throw-away Postgres database through `traces_import`;
every failed trace's steps and judges' signals are read the way `attribution_compute` reads them (with no diagnosis
run the rule judges run in place), and its features come from the trace alone. Only then are the labels read, by
this scorer: Who&When's `mistake_agent` / `mistake_step`; for tau-airline, the turn that issued the first labelled
wrong or unexpected write (runs whose only difference is a missing write have no step and are left out).

Printed: the baselines (fit nothing), the outer folds of 5-fold nested cross-validation by task (inner 4 folds choose
the settings), per fold, and "fit": the model refit on everything and scored on it (the gap to the outer figures is
memory). On tau-airline, also the shipped model (chosen leaving one dataset out, loo.py) applied as it is.
The shipped model is written by `--leave-one-dataset-out --write-model` (loo.py), not here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.throwaway import bench_in_throwaway, dataset_folder, dataset_import, django_start

DATASETS = {"whowhen": ("whowhen-algorithm-generated", "Algorithm-Generated-*.json"),
            "tau-airline": ("tau-airline", "airline-*.json")}
SPAN_KINDS = ("wrong_arguments", "unexpected_action")


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=sorted(DATASETS), default="whowhen")
    p.add_argument("--pg", default=os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432"))
    p.add_argument("--db", default="clear_bench_attribution")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    p.add_argument("--keep-db", action="store_true")
    p.add_argument("--outer", type=int, default=5)
    p.add_argument("--inner", type=int, default=4)
    p.add_argument("--write-model", action="store_true",
                   help="with --leave-one-dataset-out: write the chosen setting for all datasets as the shipped model")
    p.add_argument("--json", dest="json_out", metavar="FILE")
    p.add_argument("--leave-one-dataset-out", action="store_true",
                   help="fit on all datasets but one, score on the one left out, for each (loo.py); ignores --dataset")
    return p.parse_args(argv)


def _log(msg: str) -> None:
    print(f"[attribution] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _folder(dataset: str) -> Path:
    return dataset_folder(DATASETS[dataset][0])


def _examples(project, dataset: str) -> list:
    """Every failed trace as an Example, labels not yet attached."""
    dataset_import(project=project, folder=_folder(dataset), pattern=DATASETS[dataset][1],
                   **({"outcome": "failure"} if dataset == "whowhen" else {}))
    return failed_examples(project)


def failed_examples(project) -> list:
    """The project's failed traces, read as attribution_compute reads them, as Examples (labels not attached)."""
    from diagnosis.attribution.learned import example_build
    from diagnosis.attribution.services import feedback_signals
    from diagnosis.attribution.steps import goal_text, trace_steps
    from diagnosis.services.trace_view import trace_view_build
    from traces.models import Trace

    examples = []
    for trace in Trace.objects.filter(project=project, outcome="failure").order_by("trace_id"):
        view = trace_view_build(trace=trace)
        signals, _ = feedback_signals(project=project, trace=trace, view=view)
        examples.append(example_build(trace_id=trace.trace_id, group=trace.task_id or trace.trace_id,
                                      steps=trace_steps(view), goal=goal_text(view), signals=signals,
                                      trace=view))
    return examples


def _label(examples: list, dataset: str) -> list:
    """The scorer's step: attach labels; examples with no label are left out."""
    from diagnosis.attribution.steps import author

    rows = [json.loads(line) for line in (_folder(dataset) / "labels.jsonl").read_text().splitlines() if line.strip()]
    by_trace = {str(row["trace_id"]): row for row in rows}
    labelled = []
    for example in examples:
        row = by_trace.get(example.trace_id)
        if row is None:
            continue
        if dataset == "whowhen":
            example.label_agent, example.label_step = row["mistake_agent"], int(row["mistake_step"])
        else:
            spans = {d["span_id"] for d in row.get("write_action_differences") or []
                     if d.get("kind") in SPAN_KINDS and d.get("span_id")}
            positions = [s.position for s in example.steps if s.span_id in spans]
            if not positions:
                continue
            step = author(example.steps, min(positions))
            example.label_agent, example.label_step = step.agent, step.index
        labelled.append(example)
    return labelled


def bench(args) -> dict:
    from clear.projects.services import project_create
    from diagnosis.attribution.crossval import nested_cross_validation

    project = project_create(name=f"attribution {args.dataset}")
    started = time.monotonic()
    examples = _examples(project, args.dataset)
    _log(f"{len(examples)} failed traces read in {time.monotonic() - started:.1f} s; labels, then nested CV")
    labelled = _label(examples, args.dataset)
    started = time.monotonic()
    report, model = nested_cross_validation(labelled, outer=args.outer, inner=args.inner,
                                            trained_on=f"{DATASETS[args.dataset][0]} ({len(labelled)} traces)")
    result = {"dataset": args.dataset, "failed_traces": len(examples), "labelled": len(labelled),
              "groups": len({e.group for e in labelled}), "seconds": round(time.monotonic() - started, 1),
              **report.as_dict()}
    if args.dataset != "whowhen":
        from diagnosis.attribution.crossval import model_score
        from diagnosis.attribution.learned import shipped_model

        # The shipped model never saw this set: how it transfers, as the method runs in the product.
        result["shipped"] = model_score(shipped_model(), labelled).rates()
    if args.write_model:
        raise SystemExit("the shipped model is chosen leaving one dataset out: --leave-one-dataset-out --write-model")
    return result


def _print(result: dict) -> None:
    def line(name: str, rates: dict) -> str:
        return (f"   {name:42s} agent {rates['agent']:6.2%}   step exact {rates['step_exact']:6.2%}   ±1 "
                f"{rates['step_within_1']:6.2%}   ±3 {rates['step_within_3']:6.2%}")
    print(f"\n== {result['dataset']}: {result['labelled']} labelled failed traces of {result['failed_traces']}, "
          f"{result['groups']} tasks; nested CV in {result['seconds']} s")
    print("   baselines (label-free, nothing fitted):")
    for name, rates in result["baselines"].items():
        print(line(name, rates))
    print(line("LEARNED, outer folds (the method's figure)", result["outer"])
          + f"   low confidence {result['outer']['low_confidence']}")
    for fold in result["per_fold"]:
        print(line(f"  fold {fold['fold']} ({fold['count']} traces)", fold) + f"   settings {fold['settings']}")
    print(line("fit (refit on all, scored on all)", result["fit"]) + f"   settings {result['chosen']}")
    if "shipped" in result:
        print(line("shipped model, as is", result["shipped"])
              + f"   low confidence {result['shipped']['low_confidence']}")
    agents = {k: v["agent"] for k, v in result["baselines"].items() if "agent" in k}
    steps = {k: v for k, v in result["baselines"].items() if "step" in k}
    best_agent = max(agents.values())
    best_exact = max(v["step_exact"] for v in steps.values())
    best_within_3 = max(v["step_within_3"] for v in steps.values())
    print(f"   agent: outer {result['outer']['agent']:.2%} vs best baseline {best_agent:.2%} "
          f"({(result['outer']['agent'] - best_agent) * 100:+.1f} points); step exact: outer "
          f"{result['outer']['step_exact']:.2%} vs {best_exact:.2%} ({(result['outer']['step_exact'] - best_exact) * 100:+.1f}); "
          f"±3: {result['outer']['step_within_3']:.2%} vs {best_within_3:.2%} "
          f"({(result['outer']['step_within_3'] - best_within_3) * 100:+.1f})")


def main(argv=None) -> dict:
    args = _args(argv)
    if args.leave_one_dataset_out:
        from benchmarks.attribution.loo import loo_bench, loo_print

        run_bench, print_result = loo_bench, loo_print
    else:
        run_bench, print_result = bench, _print
    result = bench_in_throwaway(pg=args.pg, db=args.db, keep=args.keep_db,
                                setup=lambda: django_start(pg=args.pg, db=args.db, redis=args.redis),
                                bench=lambda: run_bench(args))
    print_result(result)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=1, default=str))
    return result
