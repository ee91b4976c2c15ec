"""Labels of the support desk's planted faults: where each one acted, in a file beside the traces, never in a span.

    python -m examples.support_desk.labels --out DIR --seed 0 --bugs all --release r1

writes one OTLP/JSON file per task and `DIR/labels.jsonl` (one line per trace: `trace_id`, `task_id`, `failed`,
`mistakes: [{bug, agent, span_id, step_index, agent_span_id, tool_span_ids, lost_tool_span_ids}]`). From Python,
`export_run(out=..., seed=..., bugs=...)`. It is a package beside the desk's modules, not one of them, because
`make-target-repo` copies every `*.py` of the desk into the evolution target, where nothing may name a fault.
"""

from .export import LABELS_FILE, bugs_slug, export_run, read_labels, write_labels
from .mistakes import Decision, decision_probe, trace_mistakes

__all__ = [
    "LABELS_FILE",
    "Decision",
    "bugs_slug",
    "decision_probe",
    "export_run",
    "read_labels",
    "trace_mistakes",
    "write_labels",
]
