"""The labelled failing runs of Who&When and of the example agent, for issue 41's figures (turns.py); tau-airline's
are in score_tau.py. Only the scorer reads these labels: they never reach the importer or the judges.

The example agent's traces and labels come from `benchmarks/insights_real/example_agent.py` (the desk's one labels
generator, examples/support_desk/labels): its default seeds and fault combinations, written to a temporary folder as
OTLP/JSON files with a `labels.jsonl` whose rows name, per trace, `mistakes: [{bug, agent, span_id, …}]` — the
deciding agent's LLM step where each planted fault acted. Who&When's rows name `mistake_span_id`.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from benchmarks.insights_real.turns import Labelled


def _label_spans(label: dict) -> set[str]:
    spans = set(label.get("span_ids") or [])
    for key in ("span_id", "mistake_span_id"):
        if label.get(key):
            spans.add(label[key])
    for step in (label.get("steps") or []) + (label.get("mistakes") or []):
        if isinstance(step, dict) and step.get("span_id"):
            spans.add(step["span_id"])
    return spans


def jsonl_labelled(*, project, labels_file: Path) -> list[Labelled]:
    """Every failing run of the project with a label naming at least one span."""
    from traces.models import Trace

    labels: dict[str, set[str]] = {}
    for line in labels_file.read_text().splitlines():
        if line.strip():
            label = json.loads(line)
            spans = _label_spans(label)
            if spans:
                labels.setdefault(str(label["trace_id"]).lower(), set()).update(spans)
    out = []
    for trace in Trace.objects.filter(project=project):
        spans = labels.get(trace.trace_id.lower())
        if spans and trace.outcome != "success":
            out.append(Labelled(trace_pk=trace.pk, spans=spans))
    return out


def example_agent_dataset(*, directory: Path) -> tuple[Path | None, str]:
    """(folder of the example agent's traces and labels.jsonl, "") or (None, why it is not measured)."""
    try:
        module = importlib.import_module("benchmarks.insights_real.example_agent")
    except ImportError as exc:
        return None, f"benchmarks/insights_real/example_agent.py cannot be imported ({exc})"
    folder = directory / "example-agent"
    module.example_agent_dataset(dest=folder, seeds=module.DEFAULT_SEEDS, bug_specs=module.DEFAULT_BUG_SPECS)
    if not (folder / "labels.jsonl").is_file():
        return None, f"no labels.jsonl in {folder}"
    return folder, ""
