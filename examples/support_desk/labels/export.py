"""Write a run of the desk as a labelled dataset: one OTLP/JSON trace file per task, `labels.jsonl` beside them.

The layout is the one of the shared datasets (`tau-airline`, `whowhen-algorithm-generated`): each file is an
OTLP/HTTP `ExportTraceServiceRequest` in JSON encoding (hex ids, nanos as strings, enums as integers), importable by
`manage.py import_traces`; the labels are only in `labels.jsonl`, never in a span. The SDK draws trace and span ids
at random; here they are replaced by hashes of the release, seed, switches, task and span order, so the same
arguments always give byte-identical files and labels, and runs with other switches or seeds never share an id.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..config import BUG_NAMES, BugSwitches
from ..suite import BugsArgument, TaskResult, run_task
from ..tasks import select_tasks
from .mistakes import Mistake, TraceSpans, decision_probe, trace_mistakes

LABELS_FILE = "labels.jsonl"
FILE_PREFIX = "support-desk"


def bugs_slug(bugs: BugSwitches) -> str:
    """`all`, `none`, or the switches joined by `+` (file names and trace-id seeds)."""
    if bugs.enabled == BUG_NAMES:
        return "all"
    return "+".join(bugs.enabled) or "none"


def _stable_ids(spans: Sequence[ReadableSpan], *, key: str) -> tuple[str, dict[int, str]]:
    """(trace id, {SDK span id: stable span id}); spans are numbered in export order, which replays exactly."""
    trace_id = hashlib.sha256(f"{FILE_PREFIX}|{key}".encode()).hexdigest()[:32]
    span_ids = {
        span.context.span_id: hashlib.sha256(f"{trace_id}|{index}".encode()).hexdigest()[:16]
        for index, span in enumerate(spans)
    }
    return trace_id, span_ids


def _otlp_json(
    spans: Sequence[ReadableSpan], *, trace_id: str, span_ids: dict[int, str], instance_id: str
) -> dict[str, Any]:
    document = MessageToDict(encode_spans(list(spans)), use_integers_for_enums=True)

    def rewrite(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("key") == "service.instance.id" and isinstance(node.get("value"), dict):
                # The SDK draws a fresh instance id per provider; a file must not change from one export to the next.
                node["value"] = {"stringValue": instance_id}
                return
            for name, value in node.items():
                if name == "traceId" and value:
                    node[name] = trace_id
                elif name in ("spanId", "parentSpanId") and value:
                    # Protobuf's JSON mapping writes bytes as base64; OTLP/JSON wants hex.
                    node[name] = span_ids[int.from_bytes(base64.b64decode(value), "big")]
                else:
                    rewrite(value)
        elif isinstance(node, list):
            for item in node:
                rewrite(item)

    rewrite(document)
    return document


def _mistake_row(mistake: Mistake, trace: TraceSpans, span_ids: dict[int, str]) -> dict[str, Any]:
    def sid(span: ReadableSpan) -> str:
        return span_ids[span.context.span_id]

    return {
        "bug": mistake.bug,
        "agent": mistake.agent,
        "span_id": sid(mistake.step),
        "step_index": trace.step_index(mistake.step),
        "agent_span_id": sid(mistake.agent_span),
        "tool_span_ids": [sid(span) for span in mistake.tool_spans],
        "lost_tool_span_ids": [sid(span) for span in mistake.lost_spans],
    }


def _label_row(
    *, file: str, trace_id: str, result: TaskResult, bugs: BugSwitches, release: str, trace: TraceSpans,
    mistakes: list[dict[str, Any]],
) -> dict[str, Any]:
    first = mistakes[0] if mistakes else None
    return {
        "file": file,
        "trace_id": trace_id,
        "task_id": result.task_id,
        "seed": result.seed,
        "release": release,
        "bugs": list(bugs.enabled),
        "outcome": result.outcome,
        "score": result.score,
        "failed": result.outcome != "success",
        "n_steps": len(trace.steps),
        "mistakes": mistakes,
        # Who&When's field names for the first mistake, so attribution scorers read every set alike.
        "mistake_agent": first["agent"] if first else None,
        "mistake_step": first["step_index"] if first else None,
        "mistake_span_id": first["span_id"] if first else None,
    }


def export_run(
    *, out: Path, seed: int = 0, bugs: BugsArgument = "all", release: str = "dev",
    task_ids: str | Sequence[str] | None = None,
) -> tuple[list[Path], list[dict[str, Any]]]:
    """Run the tasks (each alone, exactly as inside a suite) and write their trace files into `out`.

    Returns (trace files, label rows) without writing `labels.jsonl`: callers that gather several runs in one folder
    write one labels file for all of them (`write_labels`).
    """
    switches = BugSwitches.parse(bugs)
    slug = bugs_slug(switches)
    # One instance per run, as a live suite run exports all its tasks from one provider.
    instance_id = str(uuid.UUID(hashlib.sha256(f"{FILE_PREFIX}|{release}|s{seed}|{slug}".encode()).hexdigest()[:32]))
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    rows: list[dict[str, Any]] = []
    for task in select_tasks(task_ids):
        exporter = InMemorySpanExporter()
        # One task per probe, so every decision it collects belongs to this task's one trace.
        with decision_probe() as decisions:
            result = run_task(task.task_id, seed=seed, bugs=switches, exporter=exporter, release=release)
        spans = list(exporter.get_finished_spans())
        name = f"{FILE_PREFIX}-{release}-s{seed}-{slug}-{task.task_id}"
        trace_id, span_ids = _stable_ids(spans, key=name)
        trace, mistakes = trace_mistakes(spans=spans, decisions=decisions, bugs=switches)
        path = out / f"{name}.json"
        document = _otlp_json(spans, trace_id=trace_id, span_ids=span_ids, instance_id=instance_id)
        path.write_text(json.dumps(document) + "\n", encoding="utf-8")
        paths.append(path)
        rows.append(_label_row(
            file=path.name, trace_id=trace_id, result=result, bugs=switches, release=release, trace=trace,
            mistakes=[_mistake_row(mistake, trace, span_ids) for mistake in mistakes],
        ))
    return paths, rows


def write_labels(*, folder: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path = folder / LABELS_FILE
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_labels(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
