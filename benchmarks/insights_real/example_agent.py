"""The example agent (examples/support_desk) as a labelled dataset, for the insights and attribution benchmarks.

Several seeds × several combinations of planted faults, written by the desk's one labels generator
(examples/support_desk/labels): one OTLP/JSON file per trace in `dest`, and `dest/labels.jsonl` with, per trace,
`failed` and `mistakes: [{bug, agent, span_id, step_index, tool_span_ids, ...}]` — the deciding agent's LLM step
where each fault acted (mediator_race: mediator, misroute: planner, retry_loop: billing_worker). The labels go to the
scorer only: import the trace files alone (`dataset_import(..., pattern=TRACE_PATTERN)`), as for the shared sets.

    paths, labels = example_agent_dataset(dest=Path(tmp), seeds=DEFAULT_SEEDS, bug_specs=DEFAULT_BUG_SPECS)

The desk is deterministic: the same seeds and specs give byte-identical files and labels, in well under a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from examples.support_desk.labels import LABELS_FILE, export_run, write_labels

DEFAULT_SEEDS: list[int] = [0, 1, 2]
# Every fault alone would leave each run with one failure mode; mixing them (and leaving some out) gives succeeding
# runs of every task a fault touches in some combination, which failure association needs.
DEFAULT_BUG_SPECS: list[str] = ["all", "mediator_race", "misroute,retry_loop"]
RELEASE = "example"
TRACE_PATTERN = "support-desk-*.json"
DATASET_NAME = "example-agent"


def example_agent_dataset(
    *, dest: Path, seeds: list[int], bug_specs: list[str]
) -> tuple[list[Path], list[dict[str, Any]]]:
    """Write the traces of every (seed, faults) run into `dest` plus one `labels.jsonl`; return (files, label rows).

    Each label row also names its `bugs` and `seed`, and its trace id is distinct per (seed, faults, task), so all
    runs share one project without colliding. `task_id` repeats across runs: runs of one task are grouped by it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        for spec in bug_specs:
            run_paths, run_rows = export_run(out=dest, seed=seed, bugs=spec, release=RELEASE)
            paths += run_paths
            rows += run_rows
    write_labels(folder=dest, rows=rows)
    return paths, rows


def example_agent_labels_path(dest: Path) -> Path:
    return dest / LABELS_FILE
