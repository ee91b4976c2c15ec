"""Helpers for the diagnosis tests: the example agent's and Who&When's traces stored as ingestion would store them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from diagnosis.judges.contract import SpanView, TraceView
from traces.models import Trace
from traces.normalize import decode_export_request
from traces.services import spans_ingest, trace_finalize


def ingest_otlp(*, project, body: bytes, content_type: str) -> list[str]:
    batch = decode_export_request(body=body, content_type=content_type)
    result = spans_ingest(project=project, spans=batch.spans)
    for trace in Trace.objects.filter(project=project, trace_id__in=result.trace_ids):
        trace_finalize(trace_pk=trace.pk)
    return result.trace_ids


def support_desk_ingest(*, project, bugs: str = "all", seed: int = 0, release: str = "r1", task_ids=None):
    """Run the example agent and store its spans through the ingestion service; returns its TaskResults."""
    from examples.support_desk import run_suite

    exporter = InMemorySpanExporter()
    results = run_suite(release=release, bugs=bugs, seed=seed, exporter=exporter, task_ids=task_ids)
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    ingest_otlp(project=project, body=body, content_type="application/x-protobuf")
    return results


def whowhen_files(shared_dir: Path) -> list[Path]:
    return sorted((shared_dir / "datasets" / "whowhen-algorithm-generated").glob("Algorithm-Generated-*.json"))


def whowhen_ingest(*, project, shared_dir: Path) -> dict[str, str]:
    """Store all Who&When traces; returns {trace id: file name}."""
    names = {}
    for path in whowhen_files(shared_dir):
        body = path.read_bytes()
        for trace_id in ingest_otlp(project=project, body=body, content_type="application/json"):
            names[trace_id] = path.name
    return names


def whowhen_spans(path: Path) -> list[dict]:
    document = json.loads(path.read_text())
    return [span for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def span(span_id: str, *, parent: str = "root", kind: str = "LLM", node: str = "agent", at: float = 0.0,
         duration: float = 0.5, name: str = "", **fields) -> SpanView:
    return SpanView(span_id=span_id, parent_span_id=parent, name=name or f"{kind.lower()} {span_id}", kind=kind,
                    node=node, start_time=T0 + timedelta(seconds=at),
                    end_time=T0 + timedelta(seconds=at + duration), **fields)


def view(*spans: SpanView, goal="Help the customer.", synthetic: bool = False) -> TraceView:
    root = SpanView(span_id="root", parent_span_id="", name="invoke_agent desk", kind="AGENT", node="desk",
                    start_time=T0 - timedelta(seconds=1), end_time=T0 + timedelta(seconds=60), input=goal,
                    output="Done.")
    return TraceView(trace_id="t1", spans=[root, *spans], goal=goal, final_output="Done.", synthetic_timing=synthetic)
